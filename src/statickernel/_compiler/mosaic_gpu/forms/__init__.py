"""The register forms a specialization may take, as strategies behind one interface: each
proposes itself for a body and a layout, and `choose.choose_form` asks them in order."""
