# C types for the compiled simcore/kv_cache.py (Cython pure-Python mode; setup.py NATIVE_MODULES). The .py is the
# source and runs unchanged without this file. Token counts are C longs; the rest stays Python objects.
import cython
from simcore.radix_cache cimport RadixCache, TreeNode

cdef class KVCache:
    cdef public long capacity
    cdef public long page_size
    cdef public long key_unit
    cdef public object disable_radix
    cdef public RadixCache tree
    cdef public long free
    cdef public long private
    cdef public long evicted_total

    cpdef long available(self)
    cpdef long ceil_page(self, long n)
    cpdef long floor_page(self, long n)
    cpdef long evict(self, long num_tokens)
    cpdef bint alloc(self, long n)
    cpdef void free_tokens(self, long n)
    @cython.locals(prot=long, target=long, node=TreeNode, dup=long)
    cdef TreeNode _checkpoint(self, object key, long num_tokens, TreeNode old_node, object now, bint finished)
    @cython.locals(node=TreeNode)
    cpdef TreeNode cache_unfinished(self, object key, long num_tokens, TreeNode old_node, object now)
    @cython.locals(held=long, node=TreeNode)
    cpdef void cache_finished(self, object key, long num_tokens, TreeNode old_node, object now, object kv_tokens=*)
    cpdef void release(self, TreeNode old_node, long kv_tokens)
