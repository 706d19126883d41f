# Compiled simcore/server.py (Cython pure-Python mode; setup.py NATIVE_MODULES): the extension types its
# @cython.locals declarations name, so their fields are read as struct fields. The .py runs unchanged without it.
# (A cimported name is not a module attribute of the compiled module: PrefillAdder, which tests replace in the
# module, stays a plain import.)
from simcore.kv_cache cimport KVCache
from simcore.radix_cache cimport RadixCache, TreeNode
from simcore.server_state cimport Batch, Req
from simcore.server_core cimport ServerCore
from simcore.decode_run cimport DecodeStepTimes
from simcore.frozen_new cimport frozen_new
from simcore.scheduler cimport PrefillAdder as AdderType
