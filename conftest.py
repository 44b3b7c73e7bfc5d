"""Root conftest. The optbench plugin itself is installed through its `pytest11` entry point
(`pip install -e .`); nothing here is needed for it to load."""
