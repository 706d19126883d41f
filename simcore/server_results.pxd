# Compiled simcore/server_results.py (Cython pure-Python mode; setup.py NATIVE_MODULES): the extension types its
# @cython.locals declarations name. The .py runs unchanged without it.
from simcore.kv_cache cimport KVCache
from simcore.server_state cimport Batch, Req
from simcore.server_core cimport ServerCore
from simcore.frozen_new cimport frozen_new
