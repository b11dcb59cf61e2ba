"""Planning: the layout, the loads and the loops become a frozen launch plan and its cost."""
