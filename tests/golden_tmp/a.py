import os
x: int = "a"
