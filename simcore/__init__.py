# Compiled or source modules: simcore/_native.py (SHADOWSIM_PURE_PYTHON=1 imports the .py sources).
from simcore import _native

_native.install()
