# C types for the compiled simcore/radix_cache.py (Cython pure-Python mode; setup.py NATIVE_MODULES). The .py is
# the source and runs unchanged without this file. Integer fields are C longs (token counts, ids, ticks: far
# below 2**63); times and keys stay Python objects, so every value read back is the one the .py would hold.
import cython

cdef class TreeNode:
    cdef public long id
    cdef public TreeNode parent
    cdef public dict children
    cdef public tuple key
    cdef public long ntok
    cdef public long end
    cdef public object ckey
    cdef public long lock_ref
    cdef public object last_access
    cdef public long tick

@cython.locals(node=TreeNode)
cdef TreeNode _node(long nid, TreeNode parent, tuple key, long ntok, object ckey)

@cython.locals(n=cython.Py_ssize_t, lo=cython.Py_ssize_t, hi=cython.Py_ssize_t, mid=cython.Py_ssize_t)
cpdef Py_ssize_t _common_prefix(tuple a, Py_ssize_t off, tuple b)

cdef class RadixCache:
    cdef public long page_size
    cdef public long key_unit
    cdef public object disable
    cdef public long g
    cdef public long _next_id
    cdef public long _tick
    cdef public long _next_uid
    cdef public TreeNode root
    cdef public dict _nodes
    cdef public list _heap
    cdef public long evictable_size
    cdef public long protected_size

    cdef inline void _push(self, TreeNode node)
    cpdef void _compact(self)
    cdef inline void _touch(self, TreeNode node, tuple stamp)
    @cython.locals(node=TreeNode)
    cdef TreeNode _new_node(self, TreeNode parent, tuple key, long ntok, object ckey, tuple stamp)
    @cython.locals(parent=TreeNode, new=TreeNode, front_tok=long)
    cdef TreeNode _split(self, TreeNode child, Py_ssize_t k)
    @cython.locals(n=Py_ssize_t, cap=Py_ssize_t)
    cdef tuple _begin_walk(self, object key, long max_tokens, object now)
    @cython.locals(node=TreeNode, child=TreeNode, pos=Py_ssize_t, g=long, k=Py_ssize_t, n=Py_ssize_t, ckey=tuple)
    cpdef TreeNode match_node(self, object key, long max_prefix_len, object now)
    @cython.locals(node=TreeNode, child=TreeNode, pos=Py_ssize_t, g=long, unit=long, k=Py_ssize_t, n=Py_ssize_t,
                   ckey=tuple)
    cpdef tuple insert(self, object key, long num_tokens, object now, TreeNode start=*)
    cpdef TreeNode extend_unique(self, TreeNode node, long num_tokens, object now)
    cpdef void inc_lock_ref(self, TreeNode node)
    @cython.locals(node=TreeNode, root=TreeNode, n=TreeNode)
    cpdef void move_lock(self, TreeNode old, TreeNode new)
    cpdef void dec_lock_ref(self, TreeNode node)
    @cython.locals(freed=long, node=TreeNode, parent=TreeNode, root=TreeNode)
    cpdef long evict(self, long num_tokens)
