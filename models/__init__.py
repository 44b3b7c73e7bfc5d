"""optbench's model zoo: each file here registers ModelSpecs with `optbench.register_model`.

Installed, this folder is the package `optbench.zoo`. A user's own models go in a `models/` folder of
their own repository (or any folder given with `--models-dir`) and are registered the same way.
"""
