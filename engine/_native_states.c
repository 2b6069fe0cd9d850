/* Native parse-state building for the byte automaton (optional: automaton.py has the same
 * steps in Python and uses them when this is not built, or for what it does not cover).
 *
 * A new configuration costs a closure over its kernel items and, once bytes are asked of
 * it, a scan that groups its items by the byte set moving them. Both loop over Python
 * tuples (position, origin, watch, token state); done here they skip the interpreter's
 * dispatch, which was most of their cost. The items stay Python objects so that the rest
 * of the automaton reads them as before.
 *
 * Closures that meet an intersection are left to Python (``close`` returns None).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "_native.h"

/* NFA position kinds, numbered as in automaton.py (checked there against KIND_NUMBERS). */
enum {
    K_BYTE, K_EPS, K_CALL, K_END, K_ACCEPT, K_ANY_START, K_ANY_INSIDE, K_EX_ENTER, K_EX_EXIT,
    K_ISECT_ENTER, K_ISECT, K_COUNT_ENTER, K_COUNT_HUB, K_COUNT
};

#define SELF (-1)
#define CAPSULE_NAME "surecall.engine._native.NfaTables"

/* Tuples made once per distinct fields and handed out again: parse states hold the same
 * items over and over (most of a state's items inside a called rule recur in the states
 * next to it), and a tuple found again costs neither an allocation nor a collection.
 * Keyed by the fields' identities, which the kept tuple keeps alive; an int field may be
 * a value instead (a configuration number). */
typedef struct {
    intptr_t key[4];
    PyObject *value;  /* owned; NULL: an empty slot */
} CacheSlot;

typedef struct {
    CacheSlot *slots;
    Py_ssize_t capacity, used;  /* capacity a power of two */
} TupleCache;

/* Repetition counts kept as one int object each, so that items holding them are found in
 * the item cache. */
#define COUNTS_KEPT 4096

/* Past this many tuples a cache starts over: only sharing is lost. */
#define TUPLE_CACHE_LIMIT (1 << 16)

static void tuple_cache_clear(TupleCache *cache) {
    for (Py_ssize_t i = 0; i < cache->capacity; i++) {
        Py_XDECREF(cache->slots[i].value);
    }
    free(cache->slots);
    cache->slots = NULL;
    cache->capacity = cache->used = 0;
}

/* The hashes of the native caches and indexes: HASH_SEED, then one step per value. */
#define HASH_SEED 0x9E3779B97F4A7C15ull

static uint64_t hash_step(uint64_t h, uint64_t value) {
    h = (h ^ value) * 0xBF58476D1CE4E5B9ull;
    return h ^ (h >> 31);
}

static size_t tuple_cache_hash(const intptr_t key[4]) {
    uint64_t h = HASH_SEED;
    for (int i = 0; i < 4; i++) {
        h = hash_step(h, (uint64_t)key[i]);
    }
    return (size_t)h;
}

/* The slot holding ``key``, or the empty slot where it would go (NULL with no slots). */
static CacheSlot *tuple_cache_slot(TupleCache *cache, const intptr_t key[4]) {
    if (cache->capacity == 0) {
        return NULL;
    }
    size_t j = tuple_cache_hash(key) & (size_t)(cache->capacity - 1);
    for (;;) {
        CacheSlot *slot = &cache->slots[j];
        if (slot->value == NULL || memcmp(slot->key, key, sizeof(slot->key)) == 0) {
            return slot;
        }
        j = (j + 1) & (size_t)(cache->capacity - 1);
    }
}

/* The tuple kept for ``key`` (borrowed), or NULL. */
static PyObject *tuple_cache_get(TupleCache *cache, const intptr_t key[4]) {
    CacheSlot *slot = tuple_cache_slot(cache, key);
    return slot == NULL ? NULL : slot->value;
}

/* Keep ``value`` (not stolen) for ``key``, not kept yet; -1 on failure. */
static int tuple_cache_put(TupleCache *cache, const intptr_t key[4], PyObject *value) {
    if (cache->used >= TUPLE_CACHE_LIMIT) {
        tuple_cache_clear(cache);
    }
    if ((cache->used + 1) * 2 > cache->capacity) {
        const Py_ssize_t capacity = cache->capacity ? cache->capacity * 2 : 1024;
        CacheSlot *slots = (CacheSlot *)calloc((size_t)capacity, sizeof(CacheSlot));
        if (slots == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        TupleCache grown = {slots, capacity, 0};
        for (Py_ssize_t i = 0; i < cache->capacity; i++) {
            if (cache->slots[i].value != NULL) {
                *tuple_cache_slot(&grown, cache->slots[i].key) = cache->slots[i];
                grown.used++;
            }
        }
        free(cache->slots);
        *cache = grown;
    }
    CacheSlot *slot = tuple_cache_slot(cache, key);
    memcpy(slot->key, key, sizeof(slot->key));
    Py_INCREF(value);
    slot->value = value;
    cache->used++;
    return 0;
}

/* Plain items a closure has to expand, or has reached. */
typedef struct {
    uint64_t *values;
    Py_ssize_t size, capacity;
} ItemList;

/* The plain items a closure has expanded: open addressing. A slot holds an item of the
 * current closure only when its stamp is the current one, so that the next closure starts
 * empty without clearing the slots. */
typedef struct {
    uint64_t *slots;
    uint32_t *stamps;
    uint32_t stamp;
    Py_ssize_t capacity, used;
} ItemSeen;

/* Memory that lives as long as the tables: plain configurations, made by the thousand on
 * a walk and never freed before the automaton is, are carved from chunks of it. */
typedef struct ArenaChunk {
    struct ArenaChunk *next;
    size_t used, size;
    uint64_t data[];
} ArenaChunk;

#define ARENA_CHUNK_BYTES (64 * 1024)

/* What ``plain_successor`` works in, kept between calls: most of them would otherwise
 * spend more in malloc and free than in the closure itself. ``busy`` while in use. */
typedef struct {
    ItemList work, closed;
    ItemSeen seen;
    int busy;
} PlainScratch;

/* The split of the bytes by a set of byte sets (those a plain configuration's positions
 * move by), shared by the configurations with that set: each byte's part (PLAIN_NO_PART in
 * no set), and each part's sets (bit j: mask_ids[j]) and bytes. */
typedef struct {
    int32_t refs;        /* the split cache's and each configuration's splitting by it */
    int32_t num_masks;
    uint64_t hash;
    uint64_t *mask_ids;  /* sorted, distinct */
    int32_t num_parts;
    uint64_t *part_masks;
    uint64_t (*part_bytes)[4];
    uint8_t part_of_byte[256];
} PlainSplit;

/* A plain configuration (see ``plain_fill``): its items as (origin number << 32 | position)
 * (``plain_origin``), sorted. */
typedef struct {
    int32_t count;
    uint64_t *items;
    /* While its row is being written: the split of its byte sets, and for each of them
     * the items moving by it (bit i: items[i]). */
    PlainSplit *split;
    uint64_t *mask_movers;
    int32_t parts_left;
    int8_t row_state;  /* PLAIN_ROW_UNSPLIT, PLAIN_ROW_SPLIT, PLAIN_ROW_WRITTEN */
} PlainConfig;

/* A slot of the index of plain configurations: ``plain[config]``'s items, found by hash. */
typedef struct {
    uint64_t hash;
    int32_t config;   /* -1: an empty slot */
} PlainSlot;

typedef struct {
    Py_ssize_t size;
    int8_t *kind;
    int32_t *out;        /* the successor of single-successor kinds; body for counters */
    int32_t *after;      /* counters: the position after the repetition */
    int32_t *arg;
    uint8_t *useful;
    uint8_t *scans;      /* consuming positions with a non-empty byte set */
    int32_t *eps_start;  /* epsilon successors, CSR: eps_targets[eps_start[p]:eps_start[p + 1]] */
    int32_t *eps_targets;
    Py_ssize_t num_rules;
    int32_t *rule_start;
    Py_ssize_t num_counters;
    long *counter_low, *counter_high;
    Py_ssize_t num_excepts;
    uint8_t *except_limited;
    /* Local closures, computed on first use: positions local_pool[local_start[p]:+local_len[p]]. */
    int32_t *local_start, *local_len;
    int32_t *local_pool;
    Py_ssize_t pool_size, pool_capacity;
    int32_t *visit_stamp;
    int32_t stamp;
    int32_t *stack;
    PyObject *pending;   /* automaton.PENDING */
    PyObject *self_origin;
    PyObject *zero_count, *limited_start; /* token states entering a counter and a counting except! */
    TupleCache item_cache;  /* items inside calls, watches or counters, by their fields */
    TupleCache origin_cache; /* origins (configuration, watch) */
    PyObject **counts;       /* the Python int of each repetition count below COUNTS_KEPT, made on first use */
    PyObject *closure_seen;  /* the items a closure has expanded, emptied after each (NULL while in use) */
    PyObject **positions; /* the Python int of each position, made on first use */
    PyObject **plain_items; /* the item (position, None, None, None) of each position, made on first use */
    PyObject *masks;     /* the NFA's mask list (256-bit ints) */
    int32_t *mask_id;    /* per position: its mask's index among distinct masks, -1 unknown */
    PyObject *mask_ids;  /* {mask: index} */
    uint8_t (*mask_bits)[32]; /* per mask index: its bytes as a little-endian bitset */
    Py_ssize_t mask_bits_capacity;
    /* The automaton's own containers, bound once (``bind``) for ``successor`` to close and
     * intern configurations in them as ``ByteAutomaton._close`` and ``_intern`` do. */
    PyObject *closures_inside, *index, *configs, *accepting, *callers;
    /* Per configuration, the configuration its callees name as their origin (``contexts``),
     * and {callers key: that configuration} (``context_index``): see ``settle_context``. */
    PyObject *contexts, *context_index;
    /* For ``entry``: scans of partly filled rows ({config: (by_mask, masks, partition)}),
     * partitions by masks, and a one-element list holding the current successor table. */
    PyObject *row_scans, *partitions, *table_box, *lock;
    PyObject *lock_acquire, *lock_release; /* the lock's bound methods */
    Py_buffer table_buffer;  /* a view of the table last read (``table_view``) */
    int text_mode;
    Py_ssize_t max_items, max_configs;
    /* Searches' tails (``set_search_tails``): per position the search whose tail starts a
     * unit there, and the group of searches whose tails make an item there redundant (-1:
     * none); per search how many starts it has, and its group. */
    int32_t *tail_start, *tail_drops, *tail_counts, *tail_groups;
    Py_ssize_t num_searches;
    /* Per configuration, its plain form (``plain_config_of``): NULL not looked at yet,
     * NOT_PLAIN when it has none; and the index of the plain forms. */
    PlainConfig **plain;
    Py_ssize_t plain_capacity;
    PlainSlot *plain_slots;
    Py_ssize_t plain_slot_capacity, plain_slot_used;
    PlainSplit **splits;  /* the splits by set of byte sets, by hash */
    Py_ssize_t split_capacity, split_used;
    /* The origins plain items name, by number (0: None; owned), and {origin: number}. */
    PyObject **plain_origins;
    Py_ssize_t num_plain_origins, plain_origin_capacity;
    PyObject *plain_origin_numbers;
    PlainScratch plain_scratch;
    ArenaChunk *arena;
} NfaTables;

static void plain_free(NfaTables *t);
static void plain_scratch_free(PlainScratch *scratch);

/* ``bytes`` of zeroed memory freed with the tables, 8-byte aligned; NULL with an
 * exception set. */
static void *arena_alloc(NfaTables *t, size_t bytes) {
    const size_t words = (bytes + 7) / 8;
    ArenaChunk *chunk = t->arena;
    if (chunk == NULL || chunk->size - chunk->used < words) {
        const size_t size = words > ARENA_CHUNK_BYTES / 8 ? words : ARENA_CHUNK_BYTES / 8;
        chunk = (ArenaChunk *)calloc(1, sizeof(ArenaChunk) + size * 8);
        if (chunk == NULL) {
            PyErr_NoMemory();
            return NULL;
        }
        chunk->size = size;
        chunk->next = t->arena;
        t->arena = chunk;
    }
    void *found = chunk->data + chunk->used;
    chunk->used += words;
    return found;
}

static void arena_free(NfaTables *t) {
    while (t->arena != NULL) {
        ArenaChunk *next = t->arena->next;
        free(t->arena);
        t->arena = next;
    }
}

static void tables_free(NfaTables *t) {
    if (t == NULL) {
        return;
    }
    free(t->kind); free(t->out); free(t->after); free(t->arg); free(t->useful); free(t->scans);
    free(t->eps_start); free(t->eps_targets); free(t->rule_start); free(t->counter_low); free(t->counter_high);
    free(t->except_limited); free(t->local_start); free(t->local_len); free(t->local_pool);
    free(t->visit_stamp); free(t->stack);
    Py_XDECREF(t->pending);
    Py_XDECREF(t->self_origin);
    Py_XDECREF(t->zero_count);
    Py_XDECREF(t->limited_start);
    tuple_cache_clear(&t->item_cache);
    tuple_cache_clear(&t->origin_cache);
    Py_XDECREF(t->closure_seen);
    if (t->counts != NULL) {
        for (Py_ssize_t i = 0; i < COUNTS_KEPT; i++) {
            Py_XDECREF(t->counts[i]);
        }
        free(t->counts);
    }
    if (t->positions != NULL) {
        for (Py_ssize_t p = 0; p < t->size; p++) {
            Py_XDECREF(t->positions[p]);
        }
        free(t->positions);
    }
    if (t->plain_items != NULL) {
        for (Py_ssize_t p = 0; p < t->size; p++) {
            Py_XDECREF(t->plain_items[p]);
        }
        free(t->plain_items);
    }
    Py_XDECREF(t->masks);
    Py_XDECREF(t->mask_ids);
    Py_XDECREF(t->closures_inside); Py_XDECREF(t->index); Py_XDECREF(t->configs);
    Py_XDECREF(t->accepting); Py_XDECREF(t->callers);
    Py_XDECREF(t->contexts); Py_XDECREF(t->context_index);
    Py_XDECREF(t->row_scans); Py_XDECREF(t->partitions); Py_XDECREF(t->table_box); Py_XDECREF(t->lock);
    Py_XDECREF(t->lock_acquire); Py_XDECREF(t->lock_release);
    if (t->table_buffer.obj != NULL) {
        PyBuffer_Release(&t->table_buffer);
    }
    free(t->mask_id);
    free(t->mask_bits);
    free(t->tail_start); free(t->tail_drops); free(t->tail_counts); free(t->tail_groups);
    plain_free(t);
    free(t);
}

static void capsule_destructor(PyObject *capsule) {
    tables_free((NfaTables *)PyCapsule_GetPointer(capsule, CAPSULE_NAME));
}

static NfaTables *tables_of(PyObject *capsule) {
    return (NfaTables *)PyCapsule_GetPointer(capsule, CAPSULE_NAME);
}

/* A Python int as a C long in [low, high), else -1 with an exception set. */
static int as_index(PyObject *value, long high, long *result) {
    long found = PyLong_AsLong(value);
    if (found == -1 && PyErr_Occurred()) {
        return -1;
    }
    if (found < 0 || found >= high) {
        PyErr_SetString(PyExc_ValueError, "nfa_tables: index out of range");
        return -1;
    }
    *result = found;
    return 0;
}

static void *zeroed(Py_ssize_t count, size_t item) {
    void *found = calloc((size_t)(count > 0 ? count : 1), item);
    if (found == NULL) {
        PyErr_NoMemory();
    }
    return found;
}

const char nfa_tables_doc[] = (
"nfa_tables(kind, out, arg, useful, rule_start, counters, except_limited, pending, masks)\n"
"\n"
"The NFA as C arrays, for ``close`` and ``plain_scans``: lists as in ``automaton._Nfa``\n"
"(``out`` holds an int, a list of epsilon targets or a (body, after) pair),\n"
"``except_limited`` whether each\n"
"except! region counts tokens, ``pending`` the token state of an any! met mid-token,\n"
"``masks`` the byte set of each position (``_Nfa.mask``).");

PyObject *nfa_tables(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *kind, *out, *arg, *useful, *rule_start, *counters, *except_limited, *pending, *masks;
    if (!PyArg_ParseTuple(args, "O!O!O!O!O!O!O!OO!:nfa_tables", &PyList_Type, &kind, &PyList_Type, &out,
                          &PyList_Type, &arg, &PyList_Type, &useful, &PyList_Type, &rule_start,
                          &PyList_Type, &counters, &PyList_Type, &except_limited, &pending, &PyList_Type, &masks)) {
        return NULL;
    }
    const Py_ssize_t n = PyList_GET_SIZE(kind);
    NfaTables *t = (NfaTables *)zeroed(1, sizeof(NfaTables));
    if (t == NULL) {
        return NULL;
    }
    t->size = n;
    if (PyList_GET_SIZE(out) != n || PyList_GET_SIZE(arg) != n || PyList_GET_SIZE(useful) != n ||
        PyList_GET_SIZE(masks) != n) {
        PyErr_SetString(PyExc_ValueError, "nfa_tables: position lists of different lengths");
        goto fail;
    }
    t->num_rules = PyList_GET_SIZE(rule_start);
    t->num_counters = PyList_GET_SIZE(counters);
    t->num_excepts = PyList_GET_SIZE(except_limited);
    if (!(t->kind = zeroed(n, 1)) || !(t->out = zeroed(n, 4)) || !(t->after = zeroed(n, 4)) ||
        !(t->arg = zeroed(n, 4)) || !(t->useful = zeroed(n, 1)) || !(t->scans = zeroed(n, 1)) ||
        !(t->eps_start = zeroed(n + 1, 4)) || !(t->rule_start = zeroed(t->num_rules, 4)) ||
        !(t->counter_low = zeroed(t->num_counters, sizeof(long))) ||
        !(t->counter_high = zeroed(t->num_counters, sizeof(long))) ||
        !(t->except_limited = zeroed(t->num_excepts, 1)) || !(t->local_start = zeroed(n, 4)) ||
        !(t->local_len = zeroed(n, 4)) || !(t->visit_stamp = zeroed(n, 4)) || !(t->stack = zeroed(n, 4)) ||
        !(t->positions = zeroed(n, sizeof(PyObject *))) || !(t->plain_items = zeroed(n, sizeof(PyObject *))) ||
        !(t->mask_id = zeroed(n, 4))) {
        goto fail;
    }
    Py_ssize_t num_eps = 0;
    for (Py_ssize_t p = 0; p < n; p++) {
        long value;
        if (as_index(PyList_GET_ITEM(kind, p), K_COUNT, &value) < 0) {
            goto fail;
        }
        t->kind[p] = (int8_t)value;
        if (value == K_BYTE || value == K_ANY_START || value == K_ANY_INSIDE || value == K_ISECT) {
            int has_bytes = PyObject_IsTrue(PyList_GET_ITEM(masks, p));
            if (has_bytes < 0) {
                goto fail;
            }
            t->scans[p] = (uint8_t)has_bytes;
        }
        t->useful[p] = (uint8_t)PyObject_IsTrue(PyList_GET_ITEM(useful, p));
        t->local_start[p] = -1;
        t->mask_id[p] = -1;
        PyObject *arg_value = PyList_GET_ITEM(arg, p);
        long arg_long = PyLong_AsLong(arg_value);
        if (arg_long == -1 && PyErr_Occurred()) {
            goto fail;
        }
        t->arg[p] = (int32_t)arg_long;
        PyObject *successor = PyList_GET_ITEM(out, p);
        t->out[p] = t->after[p] = -1;
        if (value == K_EPS) {
            if (!PyList_Check(successor) && !PyTuple_Check(successor)) {
                PyErr_SetString(PyExc_ValueError, "nfa_tables: epsilon successors are not a list");
                goto fail;
            }
            num_eps += PySequence_Fast_GET_SIZE(successor);
        } else if (value == K_COUNT_ENTER || value == K_COUNT_HUB) {
            long body, after_value;
            if (!PyTuple_Check(successor) || PyTuple_GET_SIZE(successor) != 2 ||
                as_index(PyTuple_GET_ITEM(successor, 0), n, &body) < 0 ||
                as_index(PyTuple_GET_ITEM(successor, 1), n, &after_value) < 0) {
                if (!PyErr_Occurred()) {
                    PyErr_SetString(PyExc_ValueError, "nfa_tables: a counter's successors are not a pair");
                }
                goto fail;
            }
            t->out[p] = (int32_t)body;
            t->after[p] = (int32_t)after_value;
        } else if (successor != Py_None) {
            long single = PyLong_AsLong(successor);
            if (single == -1 && PyErr_Occurred()) {
                goto fail;
            }
            t->out[p] = (int32_t)single;
        }
    }
    if (!(t->eps_targets = zeroed(num_eps, 4))) {
        goto fail;
    }
    Py_ssize_t filled = 0;
    for (Py_ssize_t p = 0; p < n; p++) {
        t->eps_start[p] = (int32_t)filled;
        if (t->kind[p] != K_EPS) {
            continue;
        }
        PyObject *targets = PyList_GET_ITEM(out, p);
        for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(targets); i++) {
            long target;
            if (as_index(PySequence_Fast_ITEMS(targets)[i], n, &target) < 0) {
                goto fail;
            }
            t->eps_targets[filled++] = (int32_t)target;
        }
    }
    t->eps_start[n] = (int32_t)filled;
    for (Py_ssize_t i = 0; i < t->num_rules; i++) {
        long start;
        if (as_index(PyList_GET_ITEM(rule_start, i), n, &start) < 0) {
            goto fail;
        }
        t->rule_start[i] = (int32_t)start;
    }
    for (Py_ssize_t i = 0; i < t->num_counters; i++) {
        PyObject *bounds = PyList_GET_ITEM(counters, i);
        if (!PyTuple_Check(bounds) || PyTuple_GET_SIZE(bounds) != 2) {
            PyErr_SetString(PyExc_ValueError, "nfa_tables: counter bounds are not a pair");
            goto fail;
        }
        t->counter_low[i] = PyLong_AsLong(PyTuple_GET_ITEM(bounds, 0));
        t->counter_high[i] = PyLong_AsLong(PyTuple_GET_ITEM(bounds, 1));
        if (PyErr_Occurred()) {
            goto fail;
        }
    }
    for (Py_ssize_t i = 0; i < t->num_excepts; i++) {
        t->except_limited[i] = (uint8_t)PyObject_IsTrue(PyList_GET_ITEM(except_limited, i));
    }
    /* Arguments the closure reads as indices must be in range. */
    for (Py_ssize_t p = 0; p < n; p++) {
        int8_t k = t->kind[p];
        int32_t a = t->arg[p];
        int bad = 0;
        if (k == K_CALL || k == K_END) {
            bad = a < 0 || a >= t->num_rules;
        } else if (k == K_COUNT_ENTER || k == K_COUNT_HUB) {
            bad = a < 0 || a >= t->num_counters;
        } else if (k == K_EX_ENTER) {
            bad = a < 0 || a >= t->num_excepts;
        } else if (k == K_ANY_INSIDE) {
            bad = a < 0 || a >= n;
        }
        if (k != K_EPS && k != K_ACCEPT && k != K_END && k != K_ISECT_ENTER && k != K_ISECT &&
            (t->out[p] < 0 || t->out[p] >= n)) {
            bad = 1;
        }
        if (bad) {
            PyErr_Format(PyExc_ValueError, "nfa_tables: position %zd has an out-of-range successor or argument", p);
            goto fail;
        }
    }
    Py_INCREF(pending);
    t->pending = pending;
    Py_INCREF(masks);
    t->masks = masks;
    if ((t->mask_ids = PyDict_New()) == NULL) {
        goto fail;
    }
    t->self_origin = PyLong_FromLong(SELF);
    t->zero_count = PyLong_FromLong(0);
    t->limited_start = Py_BuildValue("(iO)", 0, Py_False);
    if (t->self_origin == NULL || t->zero_count == NULL || t->limited_start == NULL) {
        goto fail;
    }
    PyObject *capsule = PyCapsule_New(t, CAPSULE_NAME, capsule_destructor);
    if (capsule == NULL) {
        tables_free(t);
    }
    return capsule;

fail:
    tables_free(t);
    return NULL;
}

/* Non-epsilon useful positions reachable from ``p`` through epsilon positions. */
static int local_closure(NfaTables *t, int32_t p, const int32_t **positions, int32_t *count) {
    if (t->local_start[p] < 0) {
        if (++t->stamp == INT32_MAX) {
            memset(t->visit_stamp, 0, (size_t)t->size * sizeof(int32_t));
            t->stamp = 1;
        }
        const int32_t stamp = t->stamp;
        Py_ssize_t top = 0, start = t->pool_size;
        t->stack[top++] = p;
        t->visit_stamp[p] = stamp;
        while (top) {
            const int32_t q = t->stack[--top];
            if (t->kind[q] == K_EPS) {
                for (int32_t i = t->eps_start[q]; i < t->eps_start[q + 1]; i++) {
                    const int32_t r = t->eps_targets[i];
                    if (t->visit_stamp[r] != stamp && t->useful[r]) {
                        t->visit_stamp[r] = stamp;
                        t->stack[top++] = r;
                    }
                }
            } else if (t->useful[q]) {
                if (t->pool_size == t->pool_capacity) {
                    Py_ssize_t capacity = t->pool_capacity ? t->pool_capacity * 2 : 4096;
                    int32_t *grown = (int32_t *)realloc(t->local_pool, (size_t)capacity * sizeof(int32_t));
                    if (grown == NULL) {
                        t->pool_size = start;
                        PyErr_NoMemory();
                        return -1;
                    }
                    t->local_pool = grown;
                    t->pool_capacity = capacity;
                }
                t->local_pool[t->pool_size++] = q;
            }
        }
        t->local_start[p] = (int32_t)start;
        t->local_len[p] = (int32_t)(t->pool_size - start);
    }
    *positions = t->local_pool + t->local_start[p];
    *count = t->local_len[p];
    return 0;
}

/* The Python int of a position (borrowed; the tables keep it). */
static PyObject *position_object(NfaTables *t, int32_t position) {
    PyObject *found = t->positions[position];
    if (found == NULL) {
        found = t->positions[position] = PyLong_FromLong(position);
    }
    return found;
}

/* A tuple whose fields the garbage collector does not track cannot be part of a reference
 * cycle. CPython drops such tuples from its tracking only once they survive a collection;
 * parse states hold hundreds of thousands of them for good, and dropping them at once keeps
 * them out of every collection's scan. */
static PyObject *untracked_if_plain(PyObject *tuple) {
    if (tuple == NULL) {
        return NULL;
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(tuple); i++) {
        if (PyObject_GC_IsTracked(PyTuple_GET_ITEM(tuple, i))) {
            return tuple;
        }
    }
    PyObject_GC_UnTrack(tuple);
    return tuple;
}

/* A frozenset of ``iterable``, untracked as ``untracked_if_plain`` when its members are. */
static PyObject *plain_frozenset(PyObject *iterable) {
    PyObject *set = PyFrozenSet_New(iterable);
    PyObject *iterator = set == NULL ? NULL : PyObject_GetIter(set);
    if (iterator == NULL) {
        Py_XDECREF(set);
        return NULL;
    }
    int plain = 1;
    PyObject *member;
    while (plain && (member = PyIter_Next(iterator)) != NULL) {
        plain = !PyObject_GC_IsTracked(member);
        Py_DECREF(member);
    }
    Py_DECREF(iterator);
    if (PyErr_Occurred()) {
        Py_DECREF(set);
        return NULL;
    }
    if (plain) {
        PyObject_GC_UnTrack(set);
    }
    return set;
}

const char frozen_doc[] = (
"frozen(iterable)\n"
"\n"
"``frozenset(iterable)``, left out of the garbage collector's tracking when no member is\n"
"tracked (such a set cannot be part of a reference cycle).");

PyObject *frozen(PyObject *self, PyObject *iterable) {
    (void)self;
    return plain_frozenset(iterable);
}

/* (position, origin, watch, token_state), stealing no references. Items outside any call,
 * watch and counter are most items of most grammars: one shared tuple per position; the
 * others are shared through the item cache. */
static PyObject *item_of(NfaTables *t, int32_t position, PyObject *origin, PyObject *watch, PyObject *token_state) {
    const int plain = origin == Py_None && watch == Py_None && token_state == Py_None;
    if (plain && t->plain_items[position] != NULL) {
        Py_INCREF(t->plain_items[position]);
        return t->plain_items[position];
    }
    const intptr_t key[4] = {position, (intptr_t)origin, (intptr_t)watch, (intptr_t)token_state};
    if (!plain) {
        PyObject *kept = tuple_cache_get(&t->item_cache, key);
        if (kept != NULL) {
            Py_INCREF(kept);
            return kept;
        }
    }
    PyObject *p = position_object(t, position);
    PyObject *item = p == NULL ? NULL : untracked_if_plain(PyTuple_Pack(4, p, origin, watch, token_state));
    if (item == NULL) {
        return NULL;
    }
    if (plain) {
        Py_INCREF(item);
        t->plain_items[position] = item;
    } else if (tuple_cache_put(&t->item_cache, key, item) < 0) {
        Py_DECREF(item);
        return NULL;
    }
    return item;
}

/* The int of a repetition count (a new reference). */
static PyObject *count_object(NfaTables *t, long count) {
    if (count < 0 || count >= COUNTS_KEPT) {
        return PyLong_FromLong(count);
    }
    if (t->counts == NULL && (t->counts = (PyObject **)zeroed(COUNTS_KEPT, sizeof(PyObject *))) == NULL) {
        return NULL;
    }
    if (t->counts[count] == NULL && (t->counts[count] = PyLong_FromLong(count)) == NULL) {
        return NULL;
    }
    return Py_NewRef(t->counts[count]);
}

/* The origin (configuration number, call watch) of items inside a call: one tuple per
 * distinct pair (a new reference); ``config`` is SELF inside the closure making the call. */
static PyObject *origin_of(NfaTables *t, long config, PyObject *call_watch) {
    const intptr_t key[4] = {-1, (intptr_t)config, (intptr_t)call_watch, 0};
    PyObject *kept = tuple_cache_get(&t->origin_cache, key);
    if (kept != NULL) {
        Py_INCREF(kept);
        return kept;
    }
    PyObject *number = config == SELF ? Py_NewRef(t->self_origin) : PyLong_FromLong(config);
    PyObject *origin = number == NULL ? NULL : untracked_if_plain(PyTuple_Pack(2, number, call_watch));
    Py_XDECREF(number);
    if (origin != NULL && tuple_cache_put(&t->origin_cache, key, origin) < 0) {
        Py_CLEAR(origin);
    }
    return origin;
}

/* Items a closure has still to expand: owned references, taken last in, first out. */
typedef struct {
    PyObject **items;
    Py_ssize_t size, capacity;
} WorkStack;

/* Put ``item`` on the stack, stealing the reference; -1 on failure (the item released). */
static int work_put(WorkStack *work, PyObject *item) {
    if (work->size == work->capacity) {
        const Py_ssize_t capacity = work->capacity ? work->capacity * 2 : 64;
        PyObject **grown = (PyObject **)realloc(work->items, (size_t)capacity * sizeof(PyObject *));
        if (grown == NULL) {
            Py_DECREF(item);
            PyErr_NoMemory();
            return -1;
        }
        work->items = grown;
        work->capacity = capacity;
    }
    work->items[work->size++] = item;
    return 0;
}

static void work_free(WorkStack *work) {
    while (work->size) {
        Py_DECREF(work->items[--work->size]);
    }
    free(work->items);
}

/* Put a new item on ``work``; -1 on failure. */
static int push(NfaTables *t, WorkStack *work, int32_t position, PyObject *origin, PyObject *watch,
                PyObject *token_state) {
    PyObject *item = item_of(t, position, origin, watch, token_state);
    return item == NULL ? -1 : work_put(work, item);
}

/* ``*dict``, made empty first if it is NULL; NULL on failure. */
static PyObject *made_dict(PyObject **dict) {
    if (*dict == NULL) {
        *dict = PyDict_New();
    }
    return *dict;
}

static PyObject *pair(PyObject *first, PyObject *second) {
    return untracked_if_plain(PyTuple_Pack(2, first, second));
}

static PyObject *rule_key(int32_t rule, PyObject *watch) {
    PyObject *number = PyLong_FromLong(rule);
    if (number == NULL) {
        return NULL;
    }
    PyObject *key = pair(number, watch);
    Py_DECREF(number);
    return key;
}

/* The item tuple's fields, with its position checked against the NFA. */
static int unpack_item(NfaTables *t, PyObject *item, int32_t *p, PyObject **o, PyObject **w, PyObject **state) {
    if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 4) {
        PyErr_SetString(PyExc_ValueError, "an automaton item is not a 4-tuple");
        return -1;
    }
    long position;
    if (as_index(PyTuple_GET_ITEM(item, 0), t->size, &position) < 0) {
        return -1;
    }
    *p = (int32_t)position;
    *o = PyTuple_GET_ITEM(item, 1);
    *w = PyTuple_GET_ITEM(item, 2);
    *state = PyTuple_GET_ITEM(item, 3);
    return 0;
}

/* ``origin[0] == SELF`` for an origin tuple; -1 on error. */
static int is_self_origin(PyObject *origin, PyObject **call_watch, long *origin_config) {
    if (!PyTuple_Check(origin) || PyTuple_GET_SIZE(origin) != 2) {
        PyErr_SetString(PyExc_ValueError, "an automaton item's origin is not a pair");
        return -1;
    }
    long found = PyLong_AsLong(PyTuple_GET_ITEM(origin, 0));
    if (found == -1 && PyErr_Occurred()) {
        return -1;
    }
    *call_watch = PyTuple_GET_ITEM(origin, 1);
    *origin_config = found;
    return found == SELF;
}

const char close_doc[] = (
"close(tables, kernel, at_boundary, text_mode, callers, max_items)\n"
"\n"
"The closure of a kernel (a frozenset of items), as ``ByteAutomaton._close_items``:\n"
"a frozenset of items; None when it meets an intersection, which only Python handles;\n"
"the item count (an int) once it exceeds ``max_items``.");

/* Add ``item`` to a closure's items (a frozenset being made), noting whether it is tracked
 * by the garbage collector; -1 on failure. */
static int add_item(PyObject *items, PyObject *item, int *any_tracked) {
    if (PyObject_GC_IsTracked(item)) {
        *any_tracked = 1;
    }
    return PySet_Add(items, item);
}

const char set_search_tails_doc[] = (
"set_search_tails(tables, starts, droppable, counts, groups)\n"
"\n"
"Gives ``close`` the searches' tails of ``automaton._SearchTails``: ``starts`` maps\n"
"positions to search numbers, ``droppable`` positions to group numbers; ``counts`` is\n"
"each search's number of starts and ``groups`` its group. A closure holding an item at\n"
"every start of a search drops the items with the same origin, watch and token state at\n"
"its group's droppable positions.");

static int search_positions(NfaTables *t, PyObject *by_position, long numbers, int32_t *out) {
    PyObject *key, *value;
    Py_ssize_t at = 0;
    while (PyDict_Next(by_position, &at, &key, &value)) {
        long position, number;
        if (as_index(key, t->size, &position) < 0 || as_index(value, numbers, &number) < 0) {
            return -1;
        }
        out[position] = (int32_t)number;
    }
    return 0;
}

PyObject *set_search_tails(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *capsule, *starts, *droppable, *counts, *groups;
    if (!PyArg_ParseTuple(args, "OO!O!O!O!:set_search_tails", &capsule, &PyDict_Type, &starts, &PyDict_Type,
                          &droppable, &PyList_Type, &counts, &PyList_Type, &groups)) {
        return NULL;
    }
    NfaTables *t = tables_of(capsule);
    if (t == NULL) {
        return NULL;
    }
    const Py_ssize_t num = PyList_GET_SIZE(counts);
    if (PyList_GET_SIZE(groups) != num) {
        PyErr_SetString(PyExc_ValueError, "set_search_tails: counts and groups of different lengths");
        return NULL;
    }
    int32_t *start = zeroed(t->size, 4), *drops = zeroed(t->size, 4);
    int32_t *tail_counts = zeroed(num, 4), *tail_groups = zeroed(num, 4);
    long num_groups = 0;
    if (start == NULL || drops == NULL || tail_counts == NULL || tail_groups == NULL) {
        goto fail;
    }
    for (Py_ssize_t p = 0; p < t->size; p++) {
        start[p] = drops[p] = -1;
    }
    for (Py_ssize_t i = 0; i < num; i++) {
        long count, group;
        if (as_index(PyList_GET_ITEM(counts, i), LONG_MAX, &count) < 0 ||
            as_index(PyList_GET_ITEM(groups, i), num, &group) < 0) {
            goto fail;
        }
        tail_counts[i] = (int32_t)count;
        tail_groups[i] = (int32_t)group;
        num_groups = group + 1 > num_groups ? group + 1 : num_groups;
    }
    if (search_positions(t, starts, (long)num, start) < 0 || search_positions(t, droppable, num_groups, drops) < 0) {
        goto fail;
    }
    free(t->tail_start); free(t->tail_drops); free(t->tail_counts); free(t->tail_groups);
    t->tail_start = start, t->tail_drops = drops, t->tail_counts = tail_counts, t->tail_groups = tail_groups;
    t->num_searches = num;
    Py_RETURN_NONE;

fail:
    free(start); free(drops); free(tail_counts); free(tail_groups);
    return NULL;
}

/* ``*key``: the key ``_SearchTails.without_subsumed`` makes of ``item`` for the search
 * ``by_position`` names at its position, (search, origin, watch, token state); NULL where
 * it names none. -1 on failure. */
static int tail_key(NfaTables *t, PyObject *item, const int32_t *by_position, PyObject **key) {
    int32_t p;
    PyObject *fields[3];
    *key = NULL;
    if (unpack_item(t, item, &p, &fields[0], &fields[1], &fields[2]) < 0) {
        return -1;
    }
    if (by_position[p] < 0) {
        return 0;
    }
    PyObject *made = PyTuple_New(4), *number = PyLong_FromLong(by_position[p]);
    if (made == NULL || number == NULL) {
        Py_XDECREF(made);
        Py_XDECREF(number);
        return -1;
    }
    PyTuple_SET_ITEM(made, 0, number);
    for (int i = 0; i < 3; i++) {
        PyTuple_SET_ITEM(made, i + 1, Py_NewRef(fields[i]));
    }
    *key = made;
    return 0;
}

/* ``items`` (a frozenset) less the items a search's tail makes redundant (see
 * ``set_search_tails``): a new reference, ``items`` itself when none is. */
static PyObject *without_subsumed(NfaTables *t, PyObject *items) {
    /* A list of the items, which holds them (and so their fields) for both passes. */
    PyObject *listed = PySequence_List(items);
    PyObject *met = NULL, *complete = NULL, *kept = NULL, *key, *count;
    if (listed == NULL) {
        return NULL;
    }
    const Py_ssize_t size = PyList_GET_SIZE(listed);
    /* How many starts of each search an item stands at, by key. */
    for (Py_ssize_t i = 0; i < size; i++) {
        if (tail_key(t, PyList_GET_ITEM(listed, i), t->tail_start, &key) < 0) {
            goto done;
        }
        if (key == NULL) {
            continue;
        }
        if (met == NULL && (met = PyDict_New()) == NULL) {
            Py_DECREF(key);
            goto done;
        }
        count = PyDict_GetItemWithError(met, key);
        long seen = count == NULL ? 0 : PyLong_AsLong(count);
        PyObject *number = PyErr_Occurred() ? NULL : PyLong_FromLong(seen + 1);
        int status = number == NULL ? -1 : PyDict_SetItem(met, key, number);
        Py_XDECREF(number);
        Py_DECREF(key);
        if (status < 0) {
            goto done;
        }
    }
    Py_ssize_t at = 0;
    while (met != NULL && PyDict_Next(met, &at, &key, &count)) {
        long number = PyLong_AsLong(PyTuple_GET_ITEM(key, 0));
        if (PyLong_AsLong(count) != t->tail_counts[number]) {
            continue;
        }
        /* The search's group, with the item's fields. */
        PyObject *group_number = PyLong_FromLong(t->tail_groups[number]);
        PyObject *group = group_number == NULL ? NULL : PyTuple_Pack(4, group_number, PyTuple_GET_ITEM(key, 1),
                                                                      PyTuple_GET_ITEM(key, 2), PyTuple_GET_ITEM(key, 3));
        Py_XDECREF(group_number);
        if (group == NULL) {
            goto done;
        }
        int status = (complete == NULL && (complete = PySet_New(NULL)) == NULL) ? -1 : PySet_Add(complete, group);
        Py_DECREF(group);
        if (status < 0) {
            goto done;
        }
    }
    if (complete == NULL) {
        kept = Py_NewRef(items);
        goto done;
    }
    if ((kept = PyFrozenSet_New(NULL)) == NULL) {
        goto done;
    }
    for (Py_ssize_t i = 0; i < size; i++) {
        PyObject *item = PyList_GET_ITEM(listed, i);
        int dropped = tail_key(t, item, t->tail_drops, &key);
        if (dropped == 0 && key != NULL) {
            dropped = PySet_Contains(complete, key);
            Py_DECREF(key);
        }
        if (dropped < 0 || (!dropped && PySet_Add(kept, item) < 0)) {
            Py_CLEAR(kept);
            goto done;
        }
    }
    if (!PyObject_GC_IsTracked(items)) {
        PyObject_GC_UnTrack(kept);
    }

done:
    Py_DECREF(listed);
    Py_XDECREF(met);
    Py_XDECREF(complete);
    return kept;
}

/* The closure of ``kernel`` as ``close`` returns it (a new reference). */
static PyObject *closure_of(NfaTables *t, PyObject *kernel, int at_boundary, int text_mode, PyObject *callers,
                            Py_ssize_t max_items) {
    if (PySet_GET_SIZE(kernel) == 1) {
        /* Inside a literal the next position is a plain byte: the kernel is its own closure. */
        PyObject *iterator = PyObject_GetIter(kernel);
        PyObject *only = iterator == NULL ? NULL : PyIter_Next(iterator);
        Py_XDECREF(iterator);
        int32_t p;
        PyObject *o, *w, *state;
        const int32_t *reached;
        int32_t count;
        int trivial = only != NULL && unpack_item(t, only, &p, &o, &w, &state) == 0 && t->kind[p] == K_BYTE &&
                      local_closure(t, p, &reached, &count) == 0 && count == 1 && reached[0] == p;
        Py_XDECREF(only);
        if (PyErr_Occurred()) {
            return NULL;
        }
        if (trivial) {
            Py_INCREF(kernel);
            return kernel;
        }
    }
    /* The set of expanded items is kept between closures: a set made and dropped per
     * closure is most of what the garbage collector is asked to look at. */
    PyObject *seen = t->closure_seen != NULL ? t->closure_seen : PySet_New(NULL);
    t->closure_seen = NULL;
    /* The closure's items go straight into the frozenset returned: a set nothing else
     * holds yet may still be added to. Dictionaries of calls are made when a call is met. */
    PyObject *items = PyFrozenSet_New(NULL);
    PyObject *callers_self = NULL, *completed_self = NULL;
    PyObject *result = NULL;
    WorkStack work = {0};
    int any_tracked = 0;
    PyObject *any_token_state = (at_boundary || text_mode) ? Py_None : t->pending;
    if (!items || !seen) {
        goto done;
    }
    {
        PyObject *iterator = PyObject_GetIter(kernel), *member;
        if (iterator == NULL) {
            goto done;
        }
        while ((member = PyIter_Next(iterator)) != NULL) {
            if (work_put(&work, member) < 0) {
                break;
            }
        }
        Py_DECREF(iterator);
        if (PyErr_Occurred()) {
            goto done;
        }
    }
    while (work.size) {
        PyObject *item = work.items[--work.size];
        int added = PySet_Contains(seen, item);
        if (added == 0) {
            added = PySet_Add(seen, item) < 0 ? -1 : 0;
        } else if (added == 1) {
            Py_DECREF(item);
            continue;
        }
        int32_t p;
        PyObject *o, *w, *state;
        if (added < 0 || unpack_item(t, item, &p, &o, &w, &state) < 0) {
            Py_DECREF(item);
            goto done;
        }
        /* The fields stay alive through ``seen``, which holds the item. */
        Py_DECREF(item);
        const int32_t *reached;
        int32_t count;
        if (local_closure(t, p, &reached, &count) < 0) {
            goto done;
        }
        for (int32_t i = 0; i < count; i++) {
            const int32_t q = reached[i];
            const int k = t->kind[q];
            const int32_t a = t->arg[q];
            PyObject *made = NULL;
            int status = 0;
            switch (k) {
            case K_BYTE:
            case K_ACCEPT:
                made = item_of(t, q, o, w, state);
                status = made ? add_item(items, made, &any_tracked) : -1;
                break;
            case K_CALL: {
                made = item_of(t, q, o, w, state);
                if (made == NULL) {
                    status = -1;
                    break;
                }
                int known = PySet_Contains(items, made);
                if (known != 0) {
                    status = known < 0 ? -1 : 0;
                    break;
                }
                if (add_item(items, made, &any_tracked) < 0) {
                    status = -1;
                    break;
                }
                PyObject *key = rule_key(a, w);
                PyObject *callers_of_rule =
                    key && made_dict(&callers_self) ? PyDict_GetItemWithError(callers_self, key) : NULL;
                if (key == NULL || (callers_of_rule == NULL && PyErr_Occurred())) {
                    Py_XDECREF(key);
                    status = -1;
                    break;
                }
                if (callers_of_rule == NULL) {
                    PyObject *fresh = PyList_New(0);
                    if (fresh == NULL || PyDict_SetItem(callers_self, key, fresh) < 0) {
                        Py_XDECREF(fresh);
                        Py_DECREF(key);
                        status = -1;
                        break;
                    }
                    callers_of_rule = fresh;
                    Py_DECREF(fresh);  /* the dict holds it */
                }
                PyObject *origin = origin_of(t, SELF, w);
                if (origin == NULL || PyList_Append(callers_of_rule, made) < 0 ||
                    push(t, &work, t->rule_start[a], origin, w, Py_None) < 0) {
                    Py_XDECREF(origin);
                    Py_DECREF(key);
                    status = -1;
                    break;
                }
                Py_DECREF(origin);
                PyObject *done_watches = completed_self ? PyDict_GetItemWithError(completed_self, key) : NULL;
                Py_DECREF(key);
                if (done_watches == NULL) {
                    status = PyErr_Occurred() ? -1 : 0;
                    break;
                }
                PyObject *iterator = PyObject_GetIter(done_watches), *done_watch;
                if (iterator == NULL) {
                    status = -1;
                    break;
                }
                while ((done_watch = PyIter_Next(iterator)) != NULL) {
                    status = push(t, &work, t->out[q], o, done_watch, state);
                    Py_DECREF(done_watch);
                    if (status < 0) {
                        break;
                    }
                }
                Py_DECREF(iterator);
                if (PyErr_Occurred()) {
                    status = -1;
                }
                break;
            }
            case K_END: {
                PyObject *call_watch;
                long origin_config;
                int self_call = is_self_origin(o, &call_watch, &origin_config);
                if (self_call < 0) {
                    status = -1;
                    break;
                }
                PyObject *key = rule_key(a, call_watch);
                if (key == NULL) {
                    status = -1;
                    break;
                }
                if (self_call) {
                    PyObject *done_watches =
                        made_dict(&completed_self) ? PyDict_GetItemWithError(completed_self, key) : NULL;
                    if (done_watches == NULL) {
                        PyObject *fresh = PyErr_Occurred() ? NULL : PySet_New(NULL);
                        if (fresh == NULL || PyDict_SetItem(completed_self, key, fresh) < 0) {
                            Py_XDECREF(fresh);
                            Py_DECREF(key);
                            status = -1;
                            break;
                        }
                        done_watches = fresh;
                        Py_DECREF(fresh);
                    }
                    int known = PySet_Contains(done_watches, w);
                    if (known != 0 || PySet_Add(done_watches, w) < 0) {
                        Py_DECREF(key);
                        status = known == 1 ? 0 : -1;
                        break;
                    }
                    PyObject *waiting = callers_self ? PyDict_GetItemWithError(callers_self, key) : NULL;
                    Py_DECREF(key);
                    if (waiting == NULL) {
                        status = PyErr_Occurred() ? -1 : 0;
                        break;
                    }
                    for (Py_ssize_t c = 0; c < PyList_GET_SIZE(waiting) && status == 0; c++) {
                        int32_t cq;
                        PyObject *co, *cw, *ct;
                        status = unpack_item(t, PyList_GET_ITEM(waiting, c), &cq, &co, &cw, &ct);
                        if (status == 0) {
                            status = push(t, &work, t->out[cq], co, w, ct);
                        }
                    }
                    break;
                }
                if (origin_config < 0 || origin_config >= PyList_GET_SIZE(callers)) {
                    Py_DECREF(key);
                    PyErr_SetString(PyExc_ValueError, "an item's origin names an unknown configuration");
                    status = -1;
                    break;
                }
                PyObject *table = PyList_GET_ITEM(callers, origin_config);
                PyObject *returns = table == Py_None ? NULL : PyDict_GetItemWithError(table, key);
                Py_DECREF(key);
                if (returns == NULL) {
                    status = PyErr_Occurred() ? -1 : 0;
                    break;
                }
                for (Py_ssize_t c = 0; c < PyList_GET_SIZE(returns) && status == 0; c++) {
                    PyObject *entry = PyList_GET_ITEM(returns, c);
                    long ret;
                    if (!PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) != 3) {
                        PyErr_SetString(PyExc_ValueError, "a caller entry is not a 3-tuple");
                        status = -1;
                    } else if ((status = as_index(PyTuple_GET_ITEM(entry, 0), t->size, &ret)) == 0) {
                        status = push(t, &work, (int32_t)ret, PyTuple_GET_ITEM(entry, 1), w, PyTuple_GET_ITEM(entry, 2));
                    }
                }
                break;
            }
            case K_ANY_START:
                made = item_of(t, q, o, w, any_token_state);
                status = made ? add_item(items, made, &any_tracked) : -1;
                break;
            case K_ANY_INSIDE:
                made = item_of(t, q, o, w, Py_None);
                status = made ? add_item(items, made, &any_tracked) : -1;
                if (status == 0 && text_mode) {
                    status = push(t, &work, a, o, w, Py_None);
                }
                break;
            case K_EX_ENTER:
                status = push(t, &work, t->out[q], o, w, (!text_mode && t->except_limited[a]) ? t->limited_start : Py_None);
                break;
            case K_COUNT_ENTER:
                status = push(t, &work, t->out[q], o, w, t->zero_count);
                if (status == 0 && t->counter_low[a] == 0) {
                    status = push(t, &work, t->after[q], o, w, Py_None);
                }
                break;
            case K_COUNT_HUB: {
                long done_count = PyLong_AsLong(state);
                if (done_count == -1 && PyErr_Occurred()) {
                    status = -1;
                    break;
                }
                done_count += 1;
                if (done_count < t->counter_high[a]) {
                    PyObject *number = count_object(t, done_count);
                    status = number ? push(t, &work, t->out[q], o, w, number) : -1;
                    Py_XDECREF(number);
                }
                if (status == 0 && done_count >= t->counter_low[a]) {
                    status = push(t, &work, t->after[q], o, w, Py_None);
                }
                break;
            }
            case K_EX_EXIT:
                status = push(t, &work, t->out[q], o, w, Py_None);
                break;
            default:  /* intersections: Python's closure handles them */
                Py_INCREF(Py_None);
                result = Py_None;
                goto done;
            }
            Py_XDECREF(made);
            if (status < 0) {
                goto done;
            }
        }
        if (PySet_GET_SIZE(items) > max_items) {
            result = PyLong_FromSsize_t(PySet_GET_SIZE(items));
            goto done;
        }
    }
    if (!any_tracked) {
        PyObject_GC_UnTrack(items);  /* as ``plain_frozenset`` */
    }
    if (t->num_searches) {
        result = without_subsumed(t, items);
        goto done;
    }
    result = items;
    items = NULL;

done:
    Py_XDECREF(items);
    if (seen != NULL && t->closure_seen == NULL) {
        PyObject *type, *value, *traceback;
        PyErr_Fetch(&type, &value, &traceback);
        if (PySet_Clear(seen) == 0) {
            t->closure_seen = seen;
            seen = NULL;
        } else {
            PyErr_Clear();
        }
        PyErr_Restore(type, value, traceback);
    }
    Py_XDECREF(seen);
    work_free(&work);
    Py_XDECREF(callers_self);
    Py_XDECREF(completed_self);
    return result;
}

PyObject *close_items(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *capsule, *kernel, *callers;
    int at_boundary, text_mode;
    Py_ssize_t max_items;
    if (!PyArg_ParseTuple(args, "OO!ppO!n:close", &capsule, &PyFrozenSet_Type, &kernel, &at_boundary, &text_mode,
                          &PyList_Type, &callers, &max_items)) {
        return NULL;
    }
    NfaTables *t = tables_of(capsule);
    return t == NULL ? NULL : closure_of(t, kernel, at_boundary, text_mode, callers, max_items);
}

const char plain_scans_doc[] = (
"plain_scans(tables, items, config)\n"
"\n"
"As ``ByteAutomaton._plain_scans``: the items after one byte, by the byte set that\n"
"scans them ({mask: tuple of items}), or None when the row needs Python's by-class\n"
"scan (watches, intersections, except! positions).");

/* A byte set (a non-negative int below 2**256) as 32 little-endian bytes; -1 on error. */
static int bits_of_int(PyObject *mask, uint8_t bits[32]) {
    if (!PyLong_Check(mask)) {
        PyErr_SetString(PyExc_TypeError, "a byte set is not an int");
        return -1;
    }
#if PY_VERSION_HEX >= 0x030D0000
    const Py_ssize_t needed = PyLong_AsNativeBytes(
        mask, bits, 32, Py_ASNATIVEBYTES_LITTLE_ENDIAN | Py_ASNATIVEBYTES_UNSIGNED_BUFFER | Py_ASNATIVEBYTES_REJECT_NEGATIVE);
    if (needed < 0) {
        return -1;
    }
    if (needed > 32) {
        PyErr_SetString(PyExc_ValueError, "a byte set is not a 256-bit int");
        return -1;
    }
    return 0;
#else
    /* Raises OverflowError for a negative int or one past 256 bits. */
    return _PyLong_AsByteArray((PyLongObject *)mask, bits, 32, 1, 0);
#endif
}

/* The index in ``mask_bits`` of the byte set ``mask`` (a 256-bit int), given one if new; -1
 * with an exception set. */
static int32_t mask_number(NfaTables *t, PyObject *mask) {
    PyObject *found = PyDict_GetItemWithError(t->mask_ids, mask);
    if (found != NULL) {
        return (int32_t)PyLong_AsLong(found);
    }
    if (PyErr_Occurred()) {
        return -1;
    }
    const long index = (long)PyDict_GET_SIZE(t->mask_ids);
    if (index >= t->mask_bits_capacity) {
        Py_ssize_t capacity = t->mask_bits_capacity ? t->mask_bits_capacity * 2 : 64;
        uint8_t (*grown)[32] = realloc(t->mask_bits, (size_t)capacity * 32);
        if (grown == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        t->mask_bits = grown;
        t->mask_bits_capacity = capacity;
    }
    if (bits_of_int(mask, t->mask_bits[index]) < 0) {
        return -1;
    }
    PyObject *number = PyLong_FromLong(index);
    int status = number == NULL ? -1 : PyDict_SetItem(t->mask_ids, mask, number);
    Py_XDECREF(number);
    return status < 0 ? -1 : (int32_t)index;
}

/* The index of position ``p``'s mask among the distinct masks, -1 on error. */
static int32_t mask_index(NfaTables *t, int32_t p) {
    if (t->mask_id[p] < 0) {
        const int32_t index = mask_number(t, PyList_GET_ITEM(t->masks, p));
        if (index < 0) {
            return -1;
        }
        t->mask_id[p] = index;
    }
    return t->mask_id[p];
}

#define MAX_SCAN_GROUPS 64

/* The configuration the items called from ``config`` name as their origin (see
 * ``settle_context``); -1 with an exception set when there is none. */
static long context_of(NfaTables *t, long config) {
    if (t->contexts == NULL || config < 0 || config >= PyList_GET_SIZE(t->contexts)) {
        PyErr_Format(PyExc_IndexError, "configuration %ld has no call context", config);
        return -1;
    }
    return PyLong_AsLong(PyList_GET_ITEM(t->contexts, config));
}

/* The origin items called from a configuration get in its scans, for the call watch it was
 * made for: one made per call watch met in a row (items of one call share it). */
typedef struct {
    PyObject *watch;   /* alive through ``origin`` */
    PyObject *origin;  /* owned; NULL before the first */
} SelfOrigin;

enum { SCAN_ERROR = -1, SCAN_SKIP, SCAN_TAKE, SCAN_REFUSE };

/* How a plain scan of configuration ``config`` reads ``item``: SCAN_SKIP (it scans no byte),
 * SCAN_REFUSE (the row is Python's scan by byte class: a watch, an intersection, an except!
 * position), or SCAN_TAKE with its position and the origin and token state of the item it
 * scans to (borrowed: from ``item``, or ``self_origin``'s for a call made inside ``config``);
 * SCAN_ERROR with an exception set. */
static int plain_scan_of_item(NfaTables *t, PyObject *item, long config, SelfOrigin *self_origin, int32_t *p,
                              PyObject **origin, PyObject **state) {
    PyObject *o, *w;
    if (unpack_item(t, item, p, &o, &w, state) < 0) {
        return SCAN_ERROR;
    }
    if (!t->scans[*p]) {
        return SCAN_SKIP;
    }
    const int k = t->kind[*p];
    if (w != Py_None || k == K_ISECT || (t->arg[*p] >= 0 && k != K_ANY_INSIDE && k != K_ANY_START)) {
        return SCAN_REFUSE;
    }
    if (k == K_ANY_START) {
        if (*state == t->pending) {
            return SCAN_SKIP;
        }
        *state = Py_None;
    }
    *origin = o;
    if (o != Py_None) {
        PyObject *call_watch;
        long origin_config;
        const int self_call = is_self_origin(o, &call_watch, &origin_config);
        if (self_call < 0) {
            return SCAN_ERROR;
        }
        if (self_call) {
            if (self_origin->origin == NULL || call_watch != self_origin->watch) {
                const long context = context_of(t, config);
                PyObject *made = context < 0 ? NULL : origin_of(t, context, call_watch);
                if (made == NULL) {
                    return SCAN_ERROR;
                }
                Py_XSETREF(self_origin->origin, made);
                self_origin->watch = call_watch;
            }
            *origin = self_origin->origin;
        }
    }
    return SCAN_TAKE;
}

/* The scan ``plain_scans`` returns (a new reference), NULL on error. */
static PyObject *plain_scans_of(NfaTables *t, PyObject *items, long config) {
    /* Items grouped by the index of their mask: a few groups, searched in order. */
    int32_t group_mask[MAX_SCAN_GROUPS];
    int32_t group_position[MAX_SCAN_GROUPS];
    Py_ssize_t group_size[MAX_SCAN_GROUPS];
    int num_groups = 0;
    /* The scanned items in order, with their groups' numbers: the groups' tuples are made
     * at their sizes once all are known. */
    const Py_ssize_t most = PySet_GET_SIZE(items);
    PyObject **scanned_items = (PyObject **)malloc((size_t)(most > 0 ? most : 1) * sizeof(PyObject *));
    uint8_t *scanned_group = (uint8_t *)malloc((size_t)(most > 0 ? most : 1));
    Py_ssize_t num_scanned = 0;
    PyObject *iterator = NULL, *item, *result = NULL;
    SelfOrigin self_origin = {NULL, NULL};
    PyObject *by_mask = NULL;
    if (scanned_items == NULL || scanned_group == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    if ((iterator = PyObject_GetIter(items)) == NULL) {
        goto done;
    }
    while ((item = PyIter_Next(iterator)) != NULL) {
        int32_t p;
        PyObject *origin, *state;
        const int read = plain_scan_of_item(t, item, config, &self_origin, &p, &origin, &state);
        if (read != SCAN_TAKE) {
            Py_DECREF(item);
            if (read == SCAN_SKIP) {
                continue;
            }
            if (read == SCAN_REFUSE) {
                Py_INCREF(Py_None);
                result = Py_None;
            }
            goto done;
        }
        PyObject *scanned = item_of(t, t->out[p], origin, Py_None, state);
        Py_DECREF(item);
        const int32_t mask = scanned == NULL ? -1 : mask_index(t, p);
        if (mask < 0) {
            Py_XDECREF(scanned);
            goto done;
        }
        int g = 0;
        while (g < num_groups && group_mask[g] != mask) {
            g++;
        }
        if (g == num_groups) {
            if (num_groups == MAX_SCAN_GROUPS) {
                /* More byte sets than groups: Python's scan handles it. */
                Py_DECREF(scanned);
                Py_INCREF(Py_None);
                result = Py_None;
                goto done;
            }
            group_mask[g] = mask;
            group_position[g] = p;
            group_size[g] = 0;
            num_groups++;
        }
        if (num_scanned == most) {  /* no more scanned items than items: a bound, never met */
            Py_DECREF(scanned);
            Py_INCREF(Py_None);
            result = Py_None;
            goto done;
        }
        scanned_items[num_scanned] = scanned;
        scanned_group[num_scanned++] = (uint8_t)g;
        group_size[g]++;
    }
    if (PyErr_Occurred() || (by_mask = PyDict_New()) == NULL) {
        goto done;
    }
    /* Tuples: rows keep these until complete, and tuples of plain values drop out of the
     * garbage collector's tracking where lists would not. */
    for (int g = 0; g < num_groups; g++) {
        PyObject *frozen = PyTuple_New(group_size[g]);
        if (frozen == NULL) {
            goto done;
        }
        Py_ssize_t filled = 0;
        for (Py_ssize_t i = 0; i < num_scanned; i++) {
            if (scanned_group[i] == g) {
                Py_INCREF(scanned_items[i]);
                PyTuple_SET_ITEM(frozen, filled++, scanned_items[i]);
            }
        }
        frozen = untracked_if_plain(frozen);
        if (PyDict_SetItem(by_mask, PyList_GET_ITEM(t->masks, group_position[g]), frozen) < 0) {
            Py_DECREF(frozen);
            goto done;
        }
        Py_DECREF(frozen);
    }
    result = by_mask;
    by_mask = NULL;

done:
    for (Py_ssize_t i = 0; i < num_scanned; i++) {
        Py_DECREF(scanned_items[i]);
    }
    free(scanned_items);
    free(scanned_group);
    Py_XDECREF(self_origin.origin);
    Py_XDECREF(iterator);
    Py_XDECREF(by_mask);
    return result;
}

PyObject *plain_scans(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *capsule, *items;
    long config;
    if (!PyArg_ParseTuple(args, "OO!l:plain_scans", &capsule, &PyFrozenSet_Type, &items, &config)) {
        return NULL;
    }
    NfaTables *t = tables_of(capsule);
    return t == NULL ? NULL : plain_scans_of(t, items, config);
}

const char intern_info_doc[] = (
"intern_info(tables, items)\n"
"\n"
"As ``ByteAutomaton._intern_info``: (whether an item accepts, the callers table\n"
"{(rule, watch): [(return position, origin, token state)]} or None when no item calls a\n"
"rule), the origins of calls made inside the configuration left SELF for\n"
"``settle_context``.");

/* Acceptance and the callers table (a new reference, None when no item calls a rule) of
 * a configuration made of ``items``, SELF origins left as they are; -1 on error. */
static int intern_info_of(NfaTables *t, PyObject *items, int *accepting, PyObject **callers_out) {
    PyObject *iterator = PyObject_GetIter(items);
    if (iterator == NULL) {
        return -1;
    }
    PyObject *callers = NULL, *item;
    *accepting = 0;
    int status = 0;
    while (status == 0 && (item = PyIter_Next(iterator)) != NULL) {
        int32_t p;
        PyObject *o, *w, *state;
        status = unpack_item(t, item, &p, &o, &w, &state);
        if (status == 0 && t->kind[p] == K_ACCEPT) {
            *accepting = 1;
        } else if (status == 0 && t->kind[p] == K_CALL) {
            PyObject *key = NULL, *entry = NULL, *returns = NULL;
            PyObject *return_position = position_object(t, t->out[p]);
            if (return_position == NULL || (callers == NULL && (callers = PyDict_New()) == NULL) ||
                (key = rule_key(t->arg[p], w)) == NULL ||
                (entry = untracked_if_plain(PyTuple_Pack(3, return_position, o, state))) == NULL) {
                status = -1;
            } else if ((returns = PyDict_GetItemWithError(callers, key)) == NULL) {
                PyObject *fresh = PyErr_Occurred() ? NULL : PyList_New(0);
                status = fresh == NULL || PyDict_SetItem(callers, key, fresh) < 0 ? -1 : 0;
                returns = fresh;
                Py_XDECREF(fresh);  /* the dict holds it */
            }
            if (status == 0) {
                status = PyList_Append(returns, entry);
            }
            Py_XDECREF(entry);
            Py_XDECREF(key);
        }
        Py_DECREF(item);
    }
    Py_DECREF(iterator);
    if (status < 0 || PyErr_Occurred()) {
        Py_XDECREF(callers);
        return -1;
    }
    if (callers == NULL) {
        Py_INCREF(Py_None);
        callers = Py_None;
    }
    *callers_out = callers;
    return 0;
}

PyObject *intern_info(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *capsule, *items, *callers;
    int accepting;
    if (!PyArg_ParseTuple(args, "OO!:intern_info", &capsule, &PyFrozenSet_Type, &items)) {
        return NULL;
    }
    NfaTables *t = tables_of(capsule);
    if (t == NULL || intern_info_of(t, items, &accepting, &callers) < 0) {
        return NULL;
    }
    return Py_BuildValue("(NN)", PyBool_FromLong(accepting), callers);
}

/* The configuration that items called from configuration ``config`` name as their origin,
 * given its callers table with the origins of its own calls still SELF: the first
 * configuration interned with an equal table (``config`` itself when it is the first),
 * since returning from a call reads nothing of its origin but that table. Callees of two
 * configurations that call the same rules with the same continuations are then the same
 * items, so their configurations, rows and masks are built once. ``*resolved`` is the table
 * with SELF made that configuration (a new reference). -1 on error. */
static long settle_context(NfaTables *t, PyObject *callers, long config, PyObject **resolved) {
    *resolved = NULL;
    if (!PyDict_Check(callers) || t->context_index == NULL) {
        PyErr_SetString(PyExc_TypeError, "settle_context: a callers table is a dict, after bind");
        return -1;
    }
    PyObject *pairs = PyList_New(0), *rule_watch, *returns, *key = NULL, *number = NULL;
    Py_ssize_t position = 0;
    int has_self = 0;
    long context = -1;
    if (pairs == NULL) {
        return -1;
    }
    while (PyDict_Next(callers, &position, &rule_watch, &returns)) {
        PyObject *frozen_returns = plain_frozenset(returns);
        PyObject *pair = frozen_returns == NULL ? NULL : untracked_if_plain(PyTuple_Pack(2, rule_watch, frozen_returns));
        Py_XDECREF(frozen_returns);
        if (pair == NULL || PyList_Append(pairs, pair) < 0) {
            Py_XDECREF(pair);
            goto done;
        }
        Py_DECREF(pair);
        if (!PyList_Check(returns)) {
            PyErr_SetString(PyExc_TypeError, "settle_context: a rule's returns are not a list");
            goto done;
        }
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(returns); i++) {
            PyObject *entry = PyList_GET_ITEM(returns, i), *call_watch;
            long origin_config;
            if (!PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) != 3) {
                PyErr_SetString(PyExc_TypeError, "settle_context: a return is not (position, origin, token state)");
                goto done;
            }
            PyObject *origin = PyTuple_GET_ITEM(entry, 1);
            const int self_call = origin == Py_None ? 0 : is_self_origin(origin, &call_watch, &origin_config);
            if (self_call < 0) {
                goto done;
            }
            has_self |= self_call;
        }
    }
    if ((key = plain_frozenset(pairs)) == NULL || (number = PyLong_FromLong(config)) == NULL) {
        goto done;
    }
    PyObject *found = PyDict_SetDefault(t->context_index, key, number);  /* borrowed */
    if (found == NULL || ((context = PyLong_AsLong(found)) == -1 && PyErr_Occurred())) {
        context = -1;
        goto done;
    }
    if (!has_self) {
        *resolved = Py_NewRef(callers);
        goto done;
    }
    /* Calls made inside the configuration's own closure return through it: their origin
     * becomes the context too. */
    PyObject *table = PyDict_New();
    position = 0;
    while (table != NULL && PyDict_Next(callers, &position, &rule_watch, &returns)) {
        PyObject *list = PyList_New(PyList_GET_SIZE(returns));
        if (list == NULL || PyDict_SetItem(table, rule_watch, list) < 0) {
            Py_XDECREF(list);
            Py_CLEAR(table);
            break;
        }
        Py_DECREF(list);  /* the table holds it */
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(returns); i++) {
            PyObject *entry = PyList_GET_ITEM(returns, i), *call_watch, *made = NULL;
            long origin_config;
            PyObject *origin = PyTuple_GET_ITEM(entry, 1);
            if (origin != Py_None && is_self_origin(origin, &call_watch, &origin_config) == 1) {
                PyObject *moved = origin_of(t, context, call_watch);
                made = moved == NULL ? NULL
                                     : untracked_if_plain(PyTuple_Pack(3, PyTuple_GET_ITEM(entry, 0), moved,
                                                                       PyTuple_GET_ITEM(entry, 2)));
                Py_XDECREF(moved);
            } else {
                made = Py_NewRef(entry);
            }
            if (made == NULL) {
                Py_CLEAR(table);
                break;
            }
            PyList_SET_ITEM(list, i, made);
        }
    }
    if (table == NULL) {
        context = -1;
    }
    *resolved = table;

done:
    Py_DECREF(pairs);
    Py_XDECREF(key);
    Py_XDECREF(number);
    if (PyErr_Occurred()) {
        Py_CLEAR(*resolved);
        return -1;
    }
    return context;
}

const char settle_context_doc[] = (
"settle_context(tables, callers, config)\n"
"\n"
"As ``ByteAutomaton._settle_context``: (the configuration that items called from\n"
"configuration ``config`` name as their origin, its callers table with SELF made that\n"
"configuration), given the table ``intern_info`` made. Needs ``bind``.");

PyObject *settle_context_py(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *capsule, *callers, *resolved;
    long config;
    if (!PyArg_ParseTuple(args, "OO!l:settle_context", &capsule, &PyDict_Type, &callers, &config)) {
        return NULL;
    }
    NfaTables *t = tables_of(capsule);
    if (t == NULL) {
        return NULL;
    }
    const long context = settle_context(t, callers, config, &resolved);
    if (context < 0) {
        return NULL;
    }
    return Py_BuildValue("(lN)", context, resolved);
}

const char bind_doc[] = (
"bind(tables, closures, index, configs, accepting, callers, contexts, context_index, scans,\n"
"     partitions, table_box, lock, text_mode, max_items, max_configs)\n"
"\n"
"Binds an automaton's containers to its tables for ``successor`` and ``entry``: the\n"
"closures of kernels inside a token ({kernel: config}), the index of configurations\n"
"({items: config}), the per-configuration lists of items, acceptance, callers tables and\n"
"call contexts, the call contexts by callers table, the scans of partly filled rows, the\n"
"partitions by byte sets, a list whose one element is the successor table, and the lock that building configurations holds.");

PyObject *bind_containers(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *capsule, *closures, *index, *configs, *accepting, *callers, *contexts, *context_index, *scans;
    PyObject *partitions, *table_box, *lock;
    int text_mode;
    Py_ssize_t max_items, max_configs;
    if (!PyArg_ParseTuple(args, "OO!O!O!O!O!O!O!O!O!O!Opnn:bind", &capsule, &PyDict_Type, &closures, &PyDict_Type,
                          &index, &PyList_Type, &configs, &PyList_Type, &accepting, &PyList_Type, &callers,
                          &PyList_Type, &contexts, &PyDict_Type, &context_index, &PyDict_Type, &scans,
                          &PyDict_Type, &partitions, &PyList_Type, &table_box, &lock, &text_mode, &max_items,
                          &max_configs)) {
        return NULL;
    }
    NfaTables *t = tables_of(capsule);
    if (t == NULL) {
        return NULL;
    }
    PyObject **slots[] = {&t->closures_inside, &t->index, &t->configs, &t->accepting, &t->callers, &t->contexts,
                          &t->context_index, &t->row_scans, &t->partitions, &t->table_box, &t->lock};
    PyObject *fresh[] = {closures, index, configs, accepting, callers, contexts, context_index, scans, partitions,
                         table_box, lock};
    for (size_t i = 0; i < sizeof(fresh) / sizeof(fresh[0]); i++) {
        PyObject *old = *slots[i];
        Py_INCREF(fresh[i]);
        *slots[i] = fresh[i];
        Py_XDECREF(old);
    }
    PyObject *acquire = PyObject_GetAttrString(lock, "acquire");
    PyObject *release = acquire == NULL ? NULL : PyObject_GetAttrString(lock, "release");
    if (release == NULL) {
        Py_XDECREF(acquire);
        return NULL;
    }
    Py_XSETREF(t->lock_acquire, acquire);
    Py_XSETREF(t->lock_release, release);
    t->text_mode = text_mode;
    t->max_items = max_items;
    t->max_configs = max_configs;
    Py_RETURN_NONE;
}

/* The configuration of ``items`` (a non-empty frozenset), interned if new; -1 on error,
 * SUCCESSOR_TOO_MANY_CONFIGS past the limit. */
#define SUCCESSOR_TOO_MANY_ITEMS (-10)
#define SUCCESSOR_TOO_MANY_CONFIGS (-11)

static long plain_known(NfaTables *t, PyObject *items);
static PyObject *config_items(NfaTables *t, long config);
static int adopt_items(NfaTables *t, long config, PyObject *items);
static int plain_index_config(NfaTables *t, long config);

/* Append a configuration's entries to the automaton's four lists together (its items,
 * None for one in plain form; whether it accepts; its callers table; its context): 0, or
 * -1 with an exception set and the lists as they were. */
static int append_config(NfaTables *t, PyObject *items, int accepting, PyObject *callers, PyObject *context) {
    PyObject *lists[] = {t->configs, t->accepting, t->callers, t->contexts};
    PyObject *values[] = {items, accepting ? Py_True : Py_False, callers, context};
    const Py_ssize_t config = PyList_GET_SIZE(t->configs);
    for (int grown = 0; grown < 4; grown++) {
        if (PyList_Append(lists[grown], values[grown]) < 0) {
            for (int i = 0; i < grown; i++) {
                PyList_SetSlice(lists[i], config, config + 1, NULL);
            }
            return -1;
        }
    }
    return 0;
}

/* Take the last configuration appended off the four lists again (a failure after it). */
static void drop_last_config(NfaTables *t) {
    PyObject *lists[] = {t->configs, t->accepting, t->callers, t->contexts};
    for (int i = 0; i < 4; i++) {
        const Py_ssize_t size = PyList_GET_SIZE(lists[i]);
        PyList_SetSlice(lists[i], size - 1, size, NULL);
    }
}

/* Intern ``items``: the number of the configuration they make, new or known (also one
 * known only in plain form, see ``plain_known``), SUCCESSOR_TOO_MANY_CONFIGS past the
 * limit, -1 with an exception set on error. A new one with a plain form is indexed by it. */
static long intern_items(NfaTables *t, PyObject *items) {
    PyObject *found = PyDict_GetItemWithError(t->index, items);
    if (found != NULL) {
        return PyLong_AsLong(found);
    }
    if (PyErr_Occurred()) {
        return -1;
    }
    const long known = plain_known(t, items);
    if (known != -1) {
        return known == -2 || adopt_items(t, known, items) < 0 ? -1 : known;
    }
    const Py_ssize_t config = PyList_GET_SIZE(t->configs);
    if (config >= t->max_configs) {
        return SUCCESSOR_TOO_MANY_CONFIGS;
    }
    int accepting;
    PyObject *callers, *number = PyLong_FromSsize_t(config);
    if (number == NULL || intern_info_of(t, items, &accepting, &callers) < 0) {
        Py_XDECREF(number);
        return -1;
    }
    PyObject *context = NULL;
    if (callers == Py_None) {
        context = Py_NewRef(number);
    } else {
        PyObject *resolved;
        const long found = settle_context(t, callers, (long)config, &resolved);
        Py_DECREF(callers);
        callers = resolved;
        context = found < 0 ? NULL : PyLong_FromLong(found);
    }
    if (context == NULL) {
        Py_XDECREF(callers);
        Py_DECREF(number);
        return -1;
    }
    /* Only items making no call can have a plain form. */
    const int calls = callers != Py_None;
    int status = append_config(t, items, accepting, callers, context);
    if (status == 0 && (status = PyDict_SetItem(t->index, items, number)) < 0) {
        drop_last_config(t);
    }
    Py_DECREF(context);
    Py_DECREF(callers);
    Py_DECREF(number);
    if (status == 0 && !calls) {
        status = plain_index_config(t, (long)config);
    }
    return status < 0 ? -1 : (long)config;
}

const char successor_doc[] = (
"successor(tables, by_mask, masks, members)\n"
"\n"
"As ``ByteAutomaton._part_successor`` with the containers given to ``bind``: the\n"
"configuration reached by the items ``by_mask`` holds for the byte sets\n"
"``masks[i]``, i in ``members``, closed inside a token and interned if new. Returns\n"
"its number (-1 for none), -10 when a closure exceeds max_items, -11 when interning\n"
"would exceed max_configs, or None when the closure meets an intersection (left to\n"
"Python).");

static PyObject *successor_of_kernel(NfaTables *t, PyObject *kernel, int any_tracked);

/* What ``successor`` returns (a new reference), NULL on error; the tables are bound. */
static PyObject *successor_of(NfaTables *t, PyObject *by_mask, PyObject *masks, PyObject *members) {
    if (!PyList_Check(masks) && !PyTuple_Check(masks)) {
        PyErr_SetString(PyExc_TypeError, "successor: masks must be a list or a tuple");
        return NULL;
    }
    if (!PyList_Check(members)) {
        PyErr_SetString(PyExc_TypeError, "successor: members must be a list");
        return NULL;
    }
    const Py_ssize_t num_members = PyList_GET_SIZE(members);
    if (num_members == 0) {
        return PyLong_FromLong(-1);
    }
    /* The kernel: the items scanned by the part's byte sets, added straight into the
     * frozenset (a set nothing else holds yet may still be added to). */
    PyObject *kernel = PyFrozenSet_New(NULL);
    int any_tracked = 0;
    if (kernel == NULL) {
        return NULL;
    }
    for (Py_ssize_t i = 0; i < num_members; i++) {
        Py_ssize_t index = PyNumber_AsSsize_t(PyList_GET_ITEM(members, i), PyExc_IndexError);
        if (index == -1 && PyErr_Occurred()) {
            Py_DECREF(kernel);
            return NULL;
        }
        if (index < 0 || index >= PySequence_Fast_GET_SIZE(masks)) {
            Py_DECREF(kernel);
            PyErr_SetString(PyExc_IndexError, "successor: a member is not an index of masks");
            return NULL;
        }
        PyObject *scanned = PyDict_GetItemWithError(by_mask, PySequence_Fast_ITEMS(masks)[index]);
        if (scanned == NULL || !PyTuple_Check(scanned)) {
            Py_DECREF(kernel);
            if (!PyErr_Occurred()) {
                PyErr_SetString(scanned == NULL ? PyExc_KeyError : PyExc_TypeError,
                                scanned == NULL ? "successor: a byte set has no scanned items"
                                                : "successor: scanned items are not a tuple");
            }
            return NULL;
        }
        for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(scanned); j++) {
            if (add_item(kernel, PyTuple_GET_ITEM(scanned, j), &any_tracked) < 0) {
                Py_DECREF(kernel);
                return NULL;
            }
        }
    }
    return successor_of_kernel(t, kernel, any_tracked);
}

/* ``successor`` of a kernel made by the caller (a frozenset nothing else holds, stolen),
 * ``any_tracked`` telling whether some item of it is tracked by the garbage collector. */
static PyObject *successor_of_kernel(NfaTables *t, PyObject *kernel, int any_tracked) {
    if (!any_tracked) {
        PyObject_GC_UnTrack(kernel);  /* as ``plain_frozenset`` */
    }
    if (PySet_GET_SIZE(kernel) == 0) {
        Py_DECREF(kernel);
        return PyLong_FromLong(-1);
    }
    PyObject *known = PyDict_GetItemWithError(t->closures_inside, kernel);
    if (known != NULL || PyErr_Occurred()) {
        Py_XINCREF(known);
        Py_DECREF(kernel);
        return known;
    }
    PyObject *items = closure_of(t, kernel, 0, t->text_mode, t->callers, t->max_items);
    if (items == NULL || items == Py_None) {
        Py_DECREF(kernel);
        return items;
    }
    long config;
    if (PyLong_Check(items)) {
        config = SUCCESSOR_TOO_MANY_ITEMS;
    } else if (PySet_GET_SIZE(items) == 0) {
        config = -1;
    } else {
        config = intern_items(t, items);
        if (config == -1 && PyErr_Occurred()) {
            Py_DECREF(items);
            Py_DECREF(kernel);
            return NULL;
        }
    }
    Py_DECREF(items);
    PyObject *number = PyLong_FromLong(config);
    if (number != NULL && config >= -1 && PyDict_SetItem(t->closures_inside, kernel, number) < 0) {
        Py_CLEAR(number);
    }
    Py_DECREF(kernel);
    return number;
}

static int check_bound(NfaTables *t, const char *function) {
    if (t->configs == NULL) {
        PyErr_Format(PyExc_ValueError, "%s: the tables are not bound to an automaton", function);
        return -1;
    }
    return 0;
}

PyObject *part_successor(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *capsule, *by_mask, *masks, *members;
    if (!PyArg_ParseTuple(args, "OO!OO!:successor", &capsule, &PyDict_Type, &by_mask, &masks, &PyList_Type,
                          &members)) {
        return NULL;
    }
    NfaTables *t = tables_of(capsule);
    if (t == NULL || check_bound(t, "successor") < 0) {
        return NULL;
    }
    return successor_of(t, by_mask, masks, members);
}

/* How a byte set meets the bytes low..high. */
enum { RANGE_MISSED, RANGE_HELD, RANGE_SPLIT };

static int range_meets(const uint8_t bits[32], int low, int high) {
    int inside = 0;
    for (int b = low; b <= high; b++) {
        inside += (bits[b >> 3] >> (b & 7)) & 1;
    }
    return inside == 0 ? RANGE_MISSED : inside == high - low + 1 ? RANGE_HELD : RANGE_SPLIT;
}



/* A writable view of a successor table: C-contiguous int32 rows of 256 entries. */
static int table_buffer(PyObject *table, Py_buffer *view) {
    if (PyObject_GetBuffer(table, view, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0) {
        return -1;
    }
    if (view->itemsize != 4 || view->ndim != 2 || view->shape[1] != 256) {
        PyBuffer_Release(view);
        PyErr_SetString(PyExc_ValueError, "an automaton's table is not int32 rows of 256 entries");
        return -1;
    }
    return 0;
}

/* The successor table's rows, as a writable view kept until the automaton replaces the
 * table (as it grows); NULL on error. */
static Py_buffer *table_view(NfaTables *t) {
    if (PyList_GET_SIZE(t->table_box) != 1) {
        PyErr_SetString(PyExc_ValueError, "the table box does not hold one table");
        return NULL;
    }
    PyObject *table = PyList_GET_ITEM(t->table_box, 0);
    if (t->table_buffer.obj != table) {
        if (t->table_buffer.obj != NULL) {
            PyBuffer_Release(&t->table_buffer);
        }
        if (table_buffer(table, &t->table_buffer) < 0) {
            t->table_buffer.obj = NULL;
            return NULL;
        }
    }
    return &t->table_buffer;
}

/* The row of ``config`` in the current table (``*row``): 1, 0 when the table has no row for
 * it yet, -1 with an exception set. */
static int row_of(NfaTables *t, long config, int32_t **row) {
    Py_buffer *table = table_view(t);
    if (table == NULL) {
        return -1;
    }
    if (config >= table->shape[0]) {
        return 0;
    }
    *row = (int32_t *)table->buf + (Py_ssize_t)config * 256;
    return 1;
}

/* Mark the bytes of the byte set ``bits`` (little-endian, 32 bytes) as members of set
 * number ``index`` (below 64) in each byte's ``membership``. */
static void add_membership(const uint8_t bits[32], int index, uint64_t membership[256]) {
    /* Only the set bits: byte sets are mostly a few bytes or short ranges. */
    for (int k = 0; k < 32; k++) {
        for (unsigned value = bits[k], b = 8 * k; value; value >>= 1, b++) {
            if (value & 1) {
                membership[b] |= (uint64_t)1 << index;
            }
        }
    }
}

/* ``partition`` of a tuple of byte sets: a new reference, None past 64 sets, NULL on error. */
static PyObject *split_bytes(PyObject *masks);

/* Each byte's part in a partition (256 int16 values, -1: no part); NULL with an exception
 * when it is not one. The partition holds the array. */
static const int16_t *partition_parts(PyObject *partition) {
    PyObject *array = PyTuple_Check(partition) && PyTuple_GET_SIZE(partition) == 3
                          ? PyTuple_GET_ITEM(partition, 0) : NULL;
    if (array == NULL || !PyBytes_Check(array) || PyBytes_GET_SIZE(array) != 256 * (Py_ssize_t)sizeof(int16_t)) {
        PyErr_SetString(PyExc_ValueError, "a partition's parts are not 256 int16 values as bytes");
        return NULL;
    }
    return (const int16_t *)PyBytes_AS_STRING(array);
}

/* The scan of configuration ``config`` kept for its partly filled row, made (and the row's
 * entries not known yet set as in the partition's fresh row) if there is none. A new
 * reference; None when the row is Python's to compute (no plain scan, or more byte sets than
 * the native split takes). */
static PyObject *row_scan(NfaTables *t, PyObject *config_number, long config, int32_t *row) {
    PyObject *scan = PyDict_GetItemWithError(t->row_scans, config_number);
    if (scan != NULL) {
        Py_INCREF(scan);
        return scan;
    }
    if (PyErr_Occurred()) {
        return NULL;
    }
    PyObject *items = config_items(t, config);
    PyObject *by_mask = items == NULL ? NULL : plain_scans_of(t, items, config);
    if (by_mask == NULL || by_mask == Py_None) {
        return by_mask;
    }
    PyObject *keys = PyDict_Keys(by_mask), *masks = NULL, *partition = NULL;
    if (keys == NULL || PyList_Sort(keys) < 0 || (masks = PyList_AsTuple(keys)) == NULL) {
        goto fail;
    }
    /* A partition not memoised yet is made here; one of more byte sets than the native
     * split takes leaves the row to Python. */
    partition = PyDict_GetItemWithError(t->partitions, masks);
    if (partition != NULL) {
        Py_INCREF(partition);
    } else if (PyErr_Occurred() || (partition = split_bytes(masks)) == NULL ||
               (partition != Py_None && PyDict_SetItem(t->partitions, masks, partition) < 0)) {
        goto fail;
    }
    if (partition == Py_None) {
        Py_DECREF(partition);
        Py_DECREF(keys);
        Py_DECREF(masks);
        Py_DECREF(by_mask);
        Py_RETURN_NONE;
    }
    const int16_t *part_of_byte = partition_parts(partition);
    if (part_of_byte == NULL) {
        goto fail;
    }
    /* The fresh row: the bytes of no part are dead, the others not computed yet. Entries
     * filled byte by byte before (``byte_entry_locked``) stay: they are their parts'
     * successors, and a caller may read them again after asking for others. */
    for (int b = 0; b < 256; b++) {
        if (row[b] == UNKNOWN && part_of_byte[b] < 0) {
            row[b] = DEAD;
        }
    }
    scan = PyTuple_Pack(3, by_mask, masks, partition);
    if (scan == NULL || PyDict_SetItem(t->row_scans, config_number, scan) < 0) {
        Py_XDECREF(scan);
        goto fail;
    }
    Py_DECREF(partition);
    Py_DECREF(keys);
    Py_DECREF(masks);
    Py_DECREF(by_mask);
    return scan;

fail:
    Py_XDECREF(partition);
    Py_XDECREF(keys);
    Py_XDECREF(masks);
    Py_DECREF(by_mask);
    return NULL;
}

const char entry_doc[] = (
"entry(tables, config, byte, by_byte=False)\n"
"\n"
"As ``ByteAutomaton._compute_entries(config, (byte,))`` for a row of plain scans, with\n"
"the containers given to ``bind``: fills the successor of ``byte`` (and the rest of its\n"
"part) and returns it, or a code as ``successor`` does; None when the entry is\n"
"Python's to compute. The caller grows the table when the successor is past its end.\n"
"With ``by_byte``, while few of the row's entries are known, only the byte's entry is\n"
"filled, from the items whose byte sets hold it (as the trie walk does at a node of few\n"
"children).");

/* A row being filled: a writable view of the table, the row, and once its scan is known,
 * each byte's part (the partition's array, held by the scan) and the parts' byte-set
 * indices. */
typedef struct {
    Py_buffer *table;
    int32_t *row;
    PyObject *scan, *parts;
    const int16_t *part_of_byte;
} RowWork;

enum { ROW_ERROR = -1, ROW_READY, ROW_KNOWN, ROW_PYTHON };

/* Open the row of ``config``: ROW_KNOWN when ``byte`` (if not negative) is filled already,
 * ROW_PYTHON when Python computes the row, ROW_READY with its scan; ROW_ERROR with an
 * exception set. ``close_row`` releases what it holds in every case. */
static int open_row(NfaTables *t, long config, int byte, const char *function, RowWork *work) {
    memset(work, 0, sizeof(*work));
    if (config < 0 || config >= PyList_GET_SIZE(t->configs) || byte > 255) {
        PyErr_Format(PyExc_IndexError, "%s: no such configuration or byte", function);
        return ROW_ERROR;
    }
    if ((work->table = table_view(t)) == NULL) {
        return ROW_ERROR;
    }
    if (config >= work->table->shape[0]) {
        PyErr_Format(PyExc_IndexError, "%s: the table has no row for the configuration", function);
        return ROW_ERROR;
    }
    work->row = (int32_t *)work->table->buf + (Py_ssize_t)config * 256;
    if (byte >= 0 && work->row[byte] != UNKNOWN) {
        return ROW_KNOWN;
    }
    PyObject *config_number = PyLong_FromLong(config);
    if (config_number == NULL) {
        return ROW_ERROR;
    }
    work->scan = row_scan(t, config_number, config, work->row);
    Py_DECREF(config_number);
    if (work->scan == NULL) {
        return ROW_ERROR;
    }
    if (work->scan == Py_None) {
        return ROW_PYTHON;
    }
    PyObject *partition = PyTuple_Check(work->scan) && PyTuple_GET_SIZE(work->scan) == 3
                              ? PyTuple_GET_ITEM(work->scan, 2) : NULL;
    if (partition == NULL || !PyTuple_Check(partition) || PyTuple_GET_SIZE(partition) != 3 ||
        !PyList_Check(PyTuple_GET_ITEM(partition, 1))) {
        PyErr_Format(PyExc_ValueError, "%s: a row scan is not (by_mask, masks, partition)", function);
        return ROW_ERROR;
    }
    if ((work->part_of_byte = partition_parts(partition)) == NULL) {
        return ROW_ERROR;
    }
    work->parts = PyTuple_GET_ITEM(partition, 1);
    return ROW_READY;
}

static void close_row(RowWork *work) {
    Py_XDECREF(work->scan);
}

/* The successor of a part of an open row, written to the part's bytes when it is one:
 * what ``successor`` returns. */
static PyObject *fill_part(NfaTables *t, RowWork *work, Py_ssize_t part) {
    if (part >= PyList_GET_SIZE(work->parts)) {
        PyErr_SetString(PyExc_ValueError, "a byte's part is not in the partition");
        return NULL;
    }
    PyObject *found = successor_of(t, PyTuple_GET_ITEM(work->scan, 0), PyTuple_GET_ITEM(work->scan, 1),
                                   PyList_GET_ITEM(work->parts, part));
    if (found == NULL || found == Py_None) {
        return found;
    }
    const long successor = PyLong_AsLong(found);
    if (successor >= -1) {
        /* The part's bytes from its target (one byte or a range, most parts) rather than
         * a pass over the whole row; other targets (scattered bytes) take the pass. */
        int low = 0, high = 255;
        PyObject *partition = PyTuple_GET_ITEM(work->scan, 2);
        PyObject *targets = PyTuple_GET_ITEM(partition, 2);
        PyObject *target = PyList_Check(targets) && part < PyList_GET_SIZE(targets) ? PyList_GET_ITEM(targets, part) : NULL;
        if (target != NULL && PyLong_CheckExact(target)) {
            low = high = (int)PyLong_AsLong(target);
        } else if (target != NULL && PySlice_Check(target)) {
            PyObject *start = ((PySliceObject *)target)->start, *stop = ((PySliceObject *)target)->stop;
            if (PyLong_CheckExact(start) && PyLong_CheckExact(stop)) {
                low = (int)PyLong_AsLong(start);
                high = (int)PyLong_AsLong(stop) - 1;
            }
        }
        if (low < 0 || high > 255 || low > high) {
            low = 0, high = 255;
        }
        for (int b = low; b <= high; b++) {
            if (work->part_of_byte[b] == part) {
                work->row[b] = (int32_t)successor;
            }
        }
    }
    return found;
}


/* ------------------------------------------------------------------ plain configurations */

/* Most configurations a mask walk builds hold only byte positions (without watches or
 * except! positions) and accepting ones, with no token state but a repetition count: a
 * key's prefix, a string's characters (under a maxLength, counted), a number's digits.
 * Their items are (origin, count, position) triples, the origins few (the calls they sit
 * in, or none). Moving them by a byte reads no Python object: the positions whose byte sets
 * hold it move on, and close through epsilon moves, counted repetitions' entries and hubs,
 * and returns from calls to byte and accepting positions again. Such configurations are
 * kept here as sorted numbers (``plain_item``) and their successors found in that form;
 * only a new one is made into Python items and interned, as any other. A closure meeting
 * anything else (a call, a watch, an except! or intersection, a search's tail start) goes
 * the general way, which computes the same successor. */

#define NOT_PLAIN ((PlainConfig *)1)
#define PLAIN_NO_PART 255
/* Items a plain configuration holds at most (one bit each in a part's movers). */
#define PLAIN_MAX_ITEMS 64
/* Most parts a plain row is split into (one byte each; PLAIN_NO_PART marks none). */
#define PLAIN_MAX_PARTS 255

enum { PLAIN_ERROR = -1, PLAIN_DONE, PLAIN_GENERAL };
enum { PLAIN_ROW_UNSPLIT, PLAIN_ROW_SPLIT, PLAIN_ROW_WRITTEN };

static void split_release(PlainSplit *split) {
    if (split != NULL && --split->refs == 0) {
        free(split->mask_ids);
        free(split->part_masks);
        free(split->part_bytes);
        free(split);
    }
}

static void plain_drop_split(PlainConfig *plain) {
    split_release(plain->split);
    plain->split = NULL;
    plain->mask_movers = NULL;
}

static void splits_clear(NfaTables *t) {
    for (Py_ssize_t i = 0; i < t->split_capacity; i++) {
        split_release(t->splits[i]);
        t->splits[i] = NULL;
    }
    t->split_used = 0;
}

static void plain_free(NfaTables *t) {
    for (Py_ssize_t c = 0; c < t->plain_capacity; c++) {
        PlainConfig *plain = t->plain[c];
        if (plain != NULL && plain != NOT_PLAIN) {
            plain_drop_split(plain);
        }
    }
    free(t->plain);
    free(t->plain_slots);
    for (Py_ssize_t i = 0; i < t->num_plain_origins; i++) {
        Py_XDECREF(t->plain_origins[i]);
    }
    free(t->plain_origins);
    Py_XDECREF(t->plain_origin_numbers);
    splits_clear(t);
    free(t->splits);
    plain_scratch_free(&t->plain_scratch);
    arena_free(t);
}

/* A plain item packs its origin's number, its repetition count (0: none, else the count
 * plus one) and its position into 64 bits; past these bounds items go the general way. */
#define PLAIN_POSITION_BITS 24
#define PLAIN_COUNT_BITS 16
#define PLAIN_MAX_POSITION ((int32_t)1 << PLAIN_POSITION_BITS)
#define PLAIN_MAX_COUNT_TAG (((int32_t)1 << PLAIN_COUNT_BITS) - 1)
#define PLAIN_MAX_ORIGINS ((Py_ssize_t)1 << (64 - PLAIN_POSITION_BITS - PLAIN_COUNT_BITS - 1))
/* plain_origin's answer for an origin past PLAIN_MAX_ORIGINS. */
#define PLAIN_ORIGIN_OVER (-3)

/* An item at ``position`` carrying ``carried`` (what moving it leaves as it is). */
static uint64_t packed_item(uint64_t carried, int32_t position) {
    return carried << PLAIN_POSITION_BITS | (uint32_t)position;
}

static uint64_t carried_of(uint64_t item) {
    return item >> PLAIN_POSITION_BITS;
}

static uint64_t plain_item(int32_t origin, int32_t count_tag, int32_t position) {
    return packed_item((uint64_t)(uint32_t)origin << PLAIN_COUNT_BITS | (uint32_t)count_tag, position);
}

static int32_t item_position(uint64_t item) {
    return (int32_t)(item & (PLAIN_MAX_POSITION - 1));
}

static int32_t item_count_tag(uint64_t item) {
    return (int32_t)(item >> PLAIN_POSITION_BITS & PLAIN_MAX_COUNT_TAG);
}

static int32_t item_origin(uint64_t item) {
    return (int32_t)(item >> (PLAIN_POSITION_BITS + PLAIN_COUNT_BITS));
}

/* The number of ``origin`` (None or a pair naming no SELF: a borrowed reference) among
 * the origins plain items name, given one if new; PLAIN_ORIGIN_OVER past as many as an item
 * holds, -1 with an exception set. */
static int32_t plain_origin(NfaTables *t, PyObject *origin) {
    if (t->plain_origin_numbers == NULL) {
        if ((t->plain_origin_numbers = PyDict_New()) == NULL) {
            return -1;
        }
    }
    if (origin == Py_None) {
        return 0;
    }
    const Py_ssize_t last = t->num_plain_origins - 1;
    if (last >= 1 && t->plain_origins[last] == origin) {
        return (int32_t)last;  /* the last one again: most items share it */
    }
    PyObject *found = PyDict_GetItemWithError(t->plain_origin_numbers, origin);
    if (found != NULL) {
        return (int32_t)PyLong_AsLong(found);
    }
    if (PyErr_Occurred()) {
        return -1;
    }
    if (t->num_plain_origins >= PLAIN_MAX_ORIGINS) {
        return PLAIN_ORIGIN_OVER;
    }
    if (t->num_plain_origins + 1 >= t->plain_origin_capacity) {
        const Py_ssize_t capacity = t->plain_origin_capacity ? t->plain_origin_capacity * 2 : 64;
        PyObject **grown = (PyObject **)realloc(t->plain_origins, (size_t)capacity * sizeof(PyObject *));
        if (grown == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        t->plain_origins = grown;
        t->plain_origin_capacity = capacity;
    }
    if (t->num_plain_origins == 0) {
        t->plain_origins[t->num_plain_origins++] = Py_NewRef(Py_None);
    }
    const Py_ssize_t number = t->num_plain_origins;
    PyObject *key = PyLong_FromSsize_t(number);
    if (key == NULL || PyDict_SetItem(t->plain_origin_numbers, origin, key) < 0) {
        Py_XDECREF(key);
        return -1;
    }
    Py_DECREF(key);
    t->plain_origins[t->num_plain_origins++] = Py_NewRef(origin);
    return (int32_t)number;
}

/* The origin object of an origin number (borrowed). */
static PyObject *origin_object(const NfaTables *t, int32_t number) {
    return number == 0 ? Py_None : t->plain_origins[number];
}

static uint64_t plain_hash(const uint64_t *values, int32_t count) {
    uint64_t h = HASH_SEED;
    for (int32_t i = 0; i < count; i++) {
        h = hash_step(h, values[i]);
    }
    return h;
}

/* The slot of (origin, positions), or the empty slot where it would go; NULL with no slots. */
static PlainSlot *plain_slot(NfaTables *t, uint64_t hash, const uint64_t *items, int32_t count) {
    if (t->plain_slot_capacity == 0) {
        return NULL;
    }
    const size_t mask = (size_t)t->plain_slot_capacity - 1;
    for (size_t j = (size_t)hash & mask;; j = (j + 1) & mask) {
        PlainSlot *slot = &t->plain_slots[j];
        if (slot->config < 0) {
            return slot;
        }
        if (slot->hash == hash) {
            const PlainConfig *plain = t->plain[slot->config];
            if (plain->count == count && memcmp(plain->items, items, (size_t)count * sizeof(uint64_t)) == 0) {
                return slot;
            }
        }
    }
}
/* Index ``config`` (with its plain form made) by its items; -1 on failure. */
static int plain_index_add(NfaTables *t, long config) {
    const PlainConfig *plain = t->plain[config];
    if ((t->plain_slot_used + 1) * 2 > t->plain_slot_capacity) {
        const Py_ssize_t capacity = t->plain_slot_capacity ? t->plain_slot_capacity * 2 : 1024;
        PlainSlot *slots = (PlainSlot *)malloc((size_t)capacity * sizeof(PlainSlot));
        if (slots == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        for (Py_ssize_t i = 0; i < capacity; i++) {
            slots[i].config = -1;
        }
        for (Py_ssize_t i = 0; i < t->plain_slot_capacity; i++) {
            const PlainSlot *old = &t->plain_slots[i];
            if (old->config >= 0) {
                size_t j = (size_t)old->hash & (size_t)(capacity - 1);
                while (slots[j].config >= 0) {
                    j = (j + 1) & (size_t)(capacity - 1);
                }
                slots[j] = *old;
            }
        }
        free(t->plain_slots);
        t->plain_slots = slots;
        t->plain_slot_capacity = capacity;
    }
    const uint64_t hash = plain_hash(plain->items, plain->count);
    PlainSlot *slot = plain_slot(t, hash, plain->items, plain->count);
    if (slot->config < 0) {
        slot->hash = hash;
        slot->config = (int32_t)config;
        t->plain_slot_used++;
    }
    return 0;
}

/* Make room in ``t->plain`` for configuration ``config``; -1 on failure. */
static int plain_reserve(NfaTables *t, long config) {
    if (config < t->plain_capacity) {
        return 0;
    }
    Py_ssize_t capacity = t->plain_capacity ? t->plain_capacity : 1024;
    while (capacity <= config) {
        capacity *= 2;
    }
    PlainConfig **grown = (PlainConfig **)realloc(t->plain, (size_t)capacity * sizeof(PlainConfig *));
    if (grown == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    memset(grown + t->plain_capacity, 0, (size_t)(capacity - t->plain_capacity) * sizeof(PlainConfig *));
    t->plain = grown;
    t->plain_capacity = capacity;
    return 0;
}

/* Give ``config`` the plain form ``items`` (sorted, distinct, ``count`` of them) and index it;
 * -1 on failure. */
static int plain_register(NfaTables *t, long config, const uint64_t *items, int32_t count) {
    if (plain_reserve(t, config) < 0) {
        return -1;
    }
    if (t->plain[config] != NULL) {
        return 0;
    }
    PlainConfig *plain = (PlainConfig *)arena_alloc(t, sizeof(PlainConfig));
    uint64_t *copy = plain == NULL ? NULL : (uint64_t *)arena_alloc(t, (size_t)count * sizeof(uint64_t));
    if (copy == NULL) {
        return -1;
    }
    memcpy(copy, items, (size_t)count * sizeof(uint64_t));
    plain->items = copy;
    plain->count = count;
    t->plain[config] = plain;
    return plain_index_add(t, config);
}
/* Whether position ``p`` may stand in a plain configuration. A search's tail start may
 * not: a closure holding every start drops items (``without_subsumed``); one holding none
 * drops nothing, so it needs no general way. */
static int plain_position(const NfaTables *t, int32_t p) {
    return (t->kind[p] == K_ACCEPT || (t->kind[p] == K_BYTE && t->arg[p] < 0)) &&
           (t->tail_start == NULL || t->tail_start[p] < 0);
}

static int int32_order(const void *left, const void *right) {
    const int32_t a = *(const int32_t *)left, b = *(const int32_t *)right;
    return (a > b) - (a < b);
}

static int uint64_order(const void *left, const void *right) {
    const uint64_t a = *(const uint64_t *)left, b = *(const uint64_t *)right;
    return (a > b) - (a < b);
}
/* Sort ``values`` and drop repeats: how many are left. */
static int32_t sorted_distinct(uint64_t *values, int32_t count) {
    if (count > 32) {
        qsort(values, (size_t)count, sizeof(uint64_t), uint64_order);
    } else {
        /* Most sets here are a few items: qsort's merge buffer costs more than sorting them. */
        for (int32_t i = 1; i < count; i++) {
            const uint64_t value = values[i];
            int32_t j = i;
            while (j > 0 && values[j - 1] > value) {
                values[j] = values[j - 1];
                j--;
            }
            values[j] = value;
        }
    }
    int32_t kept = 0;
    for (int32_t i = 0; i < count; i++) {
        if (kept == 0 || values[kept - 1] != values[i]) {
            values[kept++] = values[i];
        }
    }
    return kept;
}
/* The count tag of a plain item with token state ``state``: 0 for None, the count plus one
 * for a repetition count within PLAIN_COUNT_BITS, else -1 (no plain item holds it). */
static int32_t plain_count_tag(PyObject *state) {
    if (state == Py_None) {
        return 0;
    }
    if (!PyLong_CheckExact(state)) {
        return -1;
    }
    const long count = PyLong_AsLong(state);
    if (count < 0 || count >= PLAIN_MAX_COUNT_TAG) {
        PyErr_Clear();  /* an overflow is only too large a count */
        return -1;
    }
    return (int32_t)count + 1;
}

/* The plain form of ``items`` into ``found`` (sorted, distinct, ``*count`` of them): 1, 0
 * when they have none, -1 on error. */
static int plain_form_of(NfaTables *t, PyObject *items, uint64_t found[PLAIN_MAX_ITEMS], int32_t *count) {
    *count = 0;
    /* Every position of a grammar this size fits a plain item. */
    int plain = t->size <= PLAIN_MAX_POSITION && PyAnySet_Check(items) && PySet_GET_SIZE(items) <= PLAIN_MAX_ITEMS;
    PyObject *iterator = plain ? PyObject_GetIter(items) : NULL, *item;
    if (plain && iterator == NULL) {
        return -1;
    }
    while (plain && (item = PyIter_Next(iterator)) != NULL) {
        int32_t p;
        PyObject *o, *w, *state;
        int32_t origin = 0, count_tag = -1;
        int status = unpack_item(t, item, &p, &o, &w, &state);
        plain = status == 0 && w == Py_None && plain_position(t, p) && (count_tag = plain_count_tag(state)) >= 0;
        if (plain && o != Py_None) {
            PyObject *call_watch;
            long origin_config;
            const int self_call = is_self_origin(o, &call_watch, &origin_config);
            plain = self_call == 0;
            status = self_call < 0 ? -1 : status;
            if (plain && (origin = plain_origin(t, o)) < 0) {
                plain = 0;
                status = origin == PLAIN_ORIGIN_OVER ? status : -1;
            }
        }
        Py_DECREF(item);  /* the fields stay alive through the items */
        if (status < 0) {
            Py_DECREF(iterator);
            return -1;
        }
        if (plain) {
            found[(*count)++] = plain_item(origin, count_tag, p);
        }
    }
    Py_XDECREF(iterator);
    if (PyErr_Occurred()) {
        return -1;
    }
    if (!plain) {
        return 0;
    }
    *count = sorted_distinct(found, *count);
    return 1;
}

/* The plain form of ``config`` (NOT_PLAIN when it has none, read off its items the first
 * time), or NULL with an exception set. */
static PlainConfig *plain_config_of(NfaTables *t, long config) {
    if (plain_reserve(t, config) < 0) {
        return NULL;
    }
    if (t->plain[config] != NULL) {
        return t->plain[config];
    }
    uint64_t found[PLAIN_MAX_ITEMS];
    int32_t count;
    PyObject *items = config_items(t, config);
    const int plain = items == NULL ? -1 : plain_form_of(t, items, found, &count);
    if (plain < 0) {
        return NULL;
    }
    if (!plain) {
        t->plain[config] = NOT_PLAIN;
        return NOT_PLAIN;
    }
    return plain_register(t, config, found, count) < 0 ? NULL : t->plain[config];
}

/* The configuration known in plain form whose items ``items`` are (``plain_successor``
 * makes its configurations without Python items, so the index of items lacks them), -1
 * when there is none, -2 on error. */
static long plain_known(NfaTables *t, PyObject *items) {
    uint64_t found[PLAIN_MAX_ITEMS];
    int32_t count;
    const int plain = plain_form_of(t, items, found, &count);
    if (plain <= 0) {
        return plain < 0 ? -2 : -1;
    }
    const PlainSlot *slot = plain_slot(t, plain_hash(found, count), found, count);
    return slot != NULL && slot->config >= 0 ? slot->config : -1;
}

/* Index a configuration the general way made by its plain form, if it has one: a plain
 * successor reaching the same items finds it there. -1 on error. */
static int plain_index_config(NfaTables *t, long config) {
    return plain_config_of(t, config) == NULL ? -1 : 0;
}

/* The Python items of a configuration in plain form (a new reference). */
static PyObject *plain_items_object(NfaTables *t, const PlainConfig *plain) {
    PyObject *items = PyFrozenSet_New(NULL);
    int any_tracked = 0;
    if (items == NULL) {
        return NULL;
    }
    for (int32_t i = 0; i < plain->count; i++) {
        const uint64_t value = plain->items[i];
        const int32_t count_tag = item_count_tag(value);
        PyObject *state = count_tag ? count_object(t, count_tag - 1) : Py_NewRef(Py_None);
        PyObject *item = state == NULL ? NULL :
            item_of(t, item_position(value), origin_object(t, item_origin(value)), Py_None, state);
        Py_XDECREF(state);  /* the item holds it */
        if (item == NULL || add_item(items, item, &any_tracked) < 0) {
            Py_XDECREF(item);
            Py_DECREF(items);
            return NULL;
        }
        Py_DECREF(item);
    }
    if (!any_tracked) {
        PyObject_GC_UnTrack(items);  /* as ``plain_frozenset`` */
    }
    return items;
}

/* Give configuration ``config`` its Python ``items`` (a borrowed reference) when it has
 * none yet, and index them; -1 on error. */
static int adopt_items(NfaTables *t, long config, PyObject *items) {
    if (PyList_GET_ITEM(t->configs, config) != Py_None) {
        return 0;
    }
    PyObject *number = PyLong_FromLong(config);
    const int status = number == NULL ? -1 : PyDict_SetItem(t->index, items, number);
    Py_XDECREF(number);
    return status < 0 ? -1 : PyList_SetItem(t->configs, config, Py_NewRef(items));
}

/* The items of configuration ``config`` (a borrowed reference), made from its plain form
 * on first use; NULL with an exception set on error. */
static PyObject *config_items(NfaTables *t, long config) {
    PyObject *items = PyList_GET_ITEM(t->configs, config);
    if (items != Py_None) {
        return items;
    }
    const PlainConfig *plain = config < t->plain_capacity ? t->plain[config] : NULL;
    if (plain == NULL || plain == NOT_PLAIN) {
        PyErr_Format(PyExc_RuntimeError, "configuration %ld has neither items nor a plain form", config);
        return NULL;
    }
    items = plain_items_object(t, plain);
    const int status = items == NULL ? -1 : adopt_items(t, config, items);
    Py_XDECREF(items);  /* the list holds it */
    return status < 0 ? NULL : PyList_GET_ITEM(t->configs, config);
}

/* The configuration of the plain form ``values`` (sorted, distinct, ``count`` of them):
 * found in the index of plain forms, else interned in that form, its Python items left to
 * ``config_items``: appended as ``intern_items`` appends (no calls, so no callers table),
 * then indexed by its plain form. Its number, SUCCESSOR_TOO_MANY_CONFIGS past the limit,
 * -1 on error. */
static long intern_plain(NfaTables *t, const uint64_t *values, int32_t count) {
    const PlainSlot *slot = plain_slot(t, plain_hash(values, count), values, count);
    if (slot != NULL && slot->config >= 0) {
        return slot->config;
    }
    const Py_ssize_t config = PyList_GET_SIZE(t->configs);
    if (config >= t->max_configs) {
        return SUCCESSOR_TOO_MANY_CONFIGS;
    }
    int accepting = 0;
    for (int32_t i = 0; i < count; i++) {
        accepting |= t->kind[item_position(values[i])] == K_ACCEPT;
    }
    PyObject *number = PyLong_FromSsize_t(config);
    if (number == NULL) {
        return -1;
    }
    int status = append_config(t, Py_None, accepting, Py_None, number);
    if (status == 0 && (status = plain_register(t, config, values, count)) < 0) {
        if (config < t->plain_capacity) {
            t->plain[config] = NULL;
        }
        drop_last_config(t);
    }
    Py_DECREF(number);
    return status < 0 ? -1 : (long)config;
}

/* Past this many splits kept, the cache starts over (only sharing is lost). */
#define SPLITS_KEPT 4096

/* The split by the byte sets ``mask_ids`` (sorted, distinct, ``count`` <= 64) from the
 * cache, made if new (a reference the caller owns); NULL with an exception set, or NULL
 * without one past PLAIN_MAX_PARTS parts. */
static PlainSplit *split_of(NfaTables *t, const uint64_t *mask_ids, int32_t count) {
    const uint64_t hash = plain_hash(mask_ids, count);
    if (t->split_capacity) {
        const size_t mask = (size_t)t->split_capacity - 1;
        for (size_t i = (size_t)hash & mask; t->splits[i] != NULL; i = (i + 1) & mask) {
            PlainSplit *found = t->splits[i];
            if (found->hash == hash && found->num_masks == count &&
                memcmp(found->mask_ids, mask_ids, (size_t)count * sizeof(uint64_t)) == 0) {
                found->refs++;
                return found;
            }
        }
    }
    /* Each byte's membership among the sets, then the distinct memberships. */
    uint64_t membership[256] = {0};
    for (int32_t j = 0; j < count; j++) {
        add_membership(t->mask_bits[mask_ids[j]], j, membership);
    }
    PlainSplit *split = (PlainSplit *)calloc(1, sizeof(PlainSplit));
    uint64_t part_masks[PLAIN_MAX_PARTS];
    if (split == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    int32_t parts = 0;
    for (int b = 0; b < 256; b++) {
        if (membership[b] == 0) {
            split->part_of_byte[b] = PLAIN_NO_PART;
            continue;
        }
        int32_t part = 0;
        while (part < parts && part_masks[part] != membership[b]) {
            part++;
        }
        if (part == parts) {
            if (parts == PLAIN_MAX_PARTS) {
                free(split);
                return NULL;
            }
            part_masks[parts++] = membership[b];
        }
        split->part_of_byte[b] = (uint8_t)part;
    }
    split->mask_ids = (uint64_t *)malloc((size_t)(count ? count : 1) * sizeof(uint64_t));
    split->part_masks = (uint64_t *)malloc((size_t)(parts ? parts : 1) * sizeof(uint64_t));
    split->part_bytes = (uint64_t (*)[4])calloc((size_t)(parts ? parts : 1), sizeof(uint64_t[4]));
    if (split->mask_ids == NULL || split->part_masks == NULL || split->part_bytes == NULL) {
        split->refs = 1;
        split_release(split);
        PyErr_NoMemory();
        return NULL;
    }
    memcpy(split->mask_ids, mask_ids, (size_t)count * sizeof(uint64_t));
    memcpy(split->part_masks, part_masks, (size_t)parts * sizeof(uint64_t));
    for (int b = 0; b < 256; b++) {
        if (split->part_of_byte[b] != PLAIN_NO_PART) {
            split->part_bytes[split->part_of_byte[b]][b >> 6] |= (uint64_t)1 << (b & 63);
        }
    }
    split->num_masks = count;
    split->num_parts = parts;
    split->hash = hash;
    split->refs = 1;  /* the caller's */
    /* Kept: the cache's reference. */
    if (t->split_used >= SPLITS_KEPT) {
        splits_clear(t);
    }
    if ((t->split_used + 1) * 2 > t->split_capacity) {
        const Py_ssize_t capacity = t->split_capacity ? t->split_capacity * 2 : 256;
        PlainSplit **grown = (PlainSplit **)calloc((size_t)capacity, sizeof(PlainSplit *));
        if (grown == NULL) {
            return split;  /* not kept: only sharing is lost */
        }
        for (Py_ssize_t i = 0; i < t->split_capacity; i++) {
            PlainSplit *kept = t->splits[i];
            if (kept != NULL) {
                size_t j = (size_t)kept->hash & (size_t)(capacity - 1);
                while (grown[j] != NULL) {
                    j = (j + 1) & (size_t)(capacity - 1);
                }
                grown[j] = kept;
            }
        }
        free(t->splits);
        t->splits = grown;
        t->split_capacity = capacity;
    }
    size_t j = (size_t)hash & (size_t)(t->split_capacity - 1);
    while (t->splits[j] != NULL) {
        j = (j + 1) & (size_t)(t->split_capacity - 1);
    }
    t->splits[j] = split;
    split->refs++;
    t->split_used++;
    return split;
}

/* The index in ``mask_bits`` of each item's byte set, -1 for an item at a position that
 * scans none (``mask_bits`` may move meanwhile: read it afterwards); -1 on error. */
static int plain_item_masks(NfaTables *t, const PlainConfig *plain, int32_t masks[PLAIN_MAX_ITEMS]) {
    for (int32_t i = 0; i < plain->count; i++) {
        const int32_t p = item_position(plain->items[i]);
        masks[i] = -1;
        if (t->scans[p] && (masks[i] = mask_index(t, p)) < 0) {
            return -1;
        }
    }
    return 0;
}

/* Split the row of ``plain`` (``split_of`` its byte sets) and note which items move by
 * each set; -1 on failure. More parts than a byte numbers leave it unsplit (the general
 * way's row). */
static int plain_split(NfaTables *t, PlainConfig *plain) {
    uint64_t mask_ids[PLAIN_MAX_ITEMS];
    int32_t position_mask[PLAIN_MAX_ITEMS];
    if (plain_item_masks(t, plain, position_mask) < 0) {
        return -1;
    }
    int32_t count = 0;
    for (int32_t i = 0; i < plain->count; i++) {
        if (position_mask[i] >= 0) {
            mask_ids[count++] = (uint64_t)position_mask[i];
        }
    }
    count = sorted_distinct(mask_ids, count);
    PlainSplit *split = split_of(t, mask_ids, count);
    if (split == NULL) {
        return PyErr_Occurred() ? -1 : 0;
    }
    /* Kept after the row is written (a few words a configuration): no free on the way. */
    uint64_t *mask_movers = (uint64_t *)arena_alloc(t, (size_t)(count ? count : 1) * sizeof(uint64_t));
    if (mask_movers == NULL) {
        split_release(split);
        return -1;
    }
    for (int32_t i = 0; i < plain->count; i++) {
        if (position_mask[i] >= 0) {
            int32_t low = 0, high = count - 1;
            while (low < high) {
                const int32_t middle = (low + high) / 2;
                if (mask_ids[middle] < (uint64_t)position_mask[i]) {
                    low = middle + 1;
                } else {
                    high = middle;
                }
            }
            mask_movers[low] |= (uint64_t)1 << i;
        }
    }
    plain->split = split;
    plain->mask_movers = mask_movers;
    plain->parts_left = split->num_parts;
    plain->row_state = PLAIN_ROW_SPLIT;
    return 0;
}

/* The items of ``plain`` that move by the bytes of ``part`` of its split. */
static uint64_t plain_movers(const PlainConfig *plain, int32_t part) {
    uint64_t movers = 0;
    for (uint64_t masks = plain->split->part_masks[part]; masks; masks &= masks - 1) {
        movers |= plain->mask_movers[__builtin_ctzll(masks)];
    }
    return movers;
}

static int item_list_add(ItemList *list, uint64_t value) {
    if (list->size == list->capacity) {
        const Py_ssize_t capacity = list->capacity ? list->capacity * 2 : 64;
        uint64_t *grown = (uint64_t *)realloc(list->values, (size_t)capacity * sizeof(uint64_t));
        if (grown == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        list->values = grown;
        list->capacity = capacity;
    }
    list->values[list->size++] = value;
    return 0;
}

/* Empty ``seen`` for the next closure. */
static void item_seen_restart(ItemSeen *seen) {
    seen->used = 0;
    if (++seen->stamp == 0) {
        /* The stamps wrapped around: slots of some long gone closure could look current. */
        if (seen->stamps != NULL) {
            memset(seen->stamps, 0, (size_t)seen->capacity * sizeof(uint32_t));
        }
        seen->stamp = 1;
    }
}

static size_t item_seen_start(uint64_t item, Py_ssize_t capacity) {
    return (size_t)((item * 0x9E3779B97F4A7C15ull) >> 32) & (size_t)(capacity - 1);
}

/* 1 when ``item`` is new (now held), 0 when held already, -1 out of memory; ``seen`` is
 * restarted (``item_seen_restart``) before a closure's first item. */
static int item_seen_add(ItemSeen *seen, uint64_t item) {
    if ((seen->used + 1) * 2 > seen->capacity) {
        const Py_ssize_t capacity = seen->capacity ? seen->capacity * 2 : 64;
        uint64_t *slots = (uint64_t *)malloc((size_t)capacity * sizeof(uint64_t));
        uint32_t *stamps = (uint32_t *)calloc((size_t)capacity, sizeof(uint32_t));
        if (slots == NULL || stamps == NULL) {
            free(slots);
            free(stamps);
            PyErr_NoMemory();
            return -1;
        }
        for (Py_ssize_t i = 0; i < seen->capacity; i++) {
            if (seen->stamps[i] == seen->stamp) {
                size_t j = item_seen_start(seen->slots[i], capacity);
                while (stamps[j] == seen->stamp) {
                    j = (j + 1) & (size_t)(capacity - 1);
                }
                slots[j] = seen->slots[i];
                stamps[j] = seen->stamp;
            }
        }
        free(seen->slots);
        free(seen->stamps);
        seen->slots = slots;
        seen->stamps = stamps;
        seen->capacity = capacity;
    }
    size_t j = item_seen_start(item, seen->capacity);
    while (seen->stamps[j] == seen->stamp) {
        if (seen->slots[j] == item) {
            return 0;
        }
        j = (j + 1) & (size_t)(seen->capacity - 1);
    }
    seen->slots[j] = item;
    seen->stamps[j] = seen->stamp;
    seen->used++;
    return 1;
}

static void plain_scratch_free(PlainScratch *scratch) {
    free(scratch->work.values);
    free(scratch->closed.values);
    free(scratch->seen.slots);
    free(scratch->seen.stamps);
    memset(scratch, 0, sizeof(*scratch));
}

/* Put on ``work`` where a call (origin number ``origin``) of rule ``rule`` returns to, as the
 * general closure does at an END position: 0, 1 when a return is no plain item (a token
 * state, or an origin naming SELF), -1 with an exception set. */
static int plain_returns(NfaTables *t, int32_t origin, int32_t rule, ItemList *work) {
    PyObject *call_watch;
    long origin_config;
    const int self_call = is_self_origin(origin_object(t, origin), &call_watch, &origin_config);
    if (self_call != 0) {
        return self_call < 0 ? -1 : 1;
    }
    if (origin_config < 0 || origin_config >= PyList_GET_SIZE(t->callers)) {
        return 1;  /* the general way raises */
    }
    PyObject *table = PyList_GET_ITEM(t->callers, origin_config);
    if (table == Py_None) {
        return 0;
    }
    PyObject *key = rule_key(rule, call_watch);
    PyObject *returns = key == NULL ? NULL : PyDict_GetItemWithError(table, key);
    Py_XDECREF(key);
    if (returns == NULL) {
        return PyErr_Occurred() ? -1 : 0;
    }
    for (Py_ssize_t c = 0; c < PyList_GET_SIZE(returns); c++) {
        PyObject *entry = PyList_GET_ITEM(returns, c);
        long ret;
        if (!PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) != 3 || PyTuple_GET_ITEM(entry, 2) != Py_None) {
            return 1;
        }
        if (as_index(PyTuple_GET_ITEM(entry, 0), t->size, &ret) < 0) {
            return -1;
        }
        PyObject *returned_origin = PyTuple_GET_ITEM(entry, 1);
        if (returned_origin != Py_None) {
            PyObject *returned_watch;
            long returned_config;
            const int returned_self = is_self_origin(returned_origin, &returned_watch, &returned_config);
            if (returned_self != 0) {
                return returned_self < 0 ? -1 : 1;
            }
        }
        const int32_t number = plain_origin(t, returned_origin);
        if (number == PLAIN_ORIGIN_OVER) {
            return 1;
        }
        if (number < 0 || item_list_add(work, plain_item(number, 0, (int32_t)ret)) < 0) {
            return -1;
        }
    }
    return 0;
}

/* The items a counted repetition's entry or hub ``q`` moves on to from an item of
 * ``origin`` with ``count_tag`` (as the general closure: into the body with the count of
 * iterations finished, past it from the least count on), added to ``work``: 0, 1 where a
 * count does not fit a plain item, -1 on failure. */
static int plain_count_moves(NfaTables *t, int32_t q, int32_t origin, int32_t count_tag, ItemList *work) {
    const int32_t counter = t->arg[q];
    /* The iterations finished: none at the entry, at a hub the count so far plus this one. */
    long done = 0;
    if (t->kind[q] == K_COUNT_HUB) {
        if (count_tag == 0) {
            return 1;  /* a hub outside its body: the general way raises */
        }
        done = count_tag;
    }
    if (t->kind[q] == K_COUNT_ENTER || done < t->counter_high[counter]) {
        if (done + 1 > PLAIN_MAX_COUNT_TAG) {
            return 1;
        }
        if (item_list_add(work, plain_item(origin, (int32_t)done + 1, t->out[q])) < 0) {
            return -1;
        }
    }
    if (done >= t->counter_low[counter] && item_list_add(work, plain_item(origin, 0, t->after[q])) < 0) {
        return -1;
    }
    return 0;
}

/* The successor of ``plain`` by the items ``movers`` (a part's): its number, -1 when dead,
 * PLAIN_GENERAL_SUCCESSOR when the closure meets what a plain configuration cannot hold (or
 * exceeds max_items), or -2 with an exception set (a code past a limit is the general way's
 * to raise). */
#define PLAIN_GENERAL_SUCCESSOR (-3)

static long plain_successor(NfaTables *t, const PlainConfig *plain, uint64_t movers) {
    /* A closure inside another (interning can run Python code) works in its own lists. */
    PlainScratch nested = {0};
    PlainScratch *scratch = t->plain_scratch.busy ? &nested : &t->plain_scratch;
    scratch->busy = 1;
    scratch->work.size = scratch->closed.size = 0;
    item_seen_restart(&scratch->seen);
    ItemList *work = &scratch->work, *closed = &scratch->closed;
    ItemSeen *seen = &scratch->seen;
    long result = PLAIN_GENERAL_SUCCESSOR;
    for (int32_t i = 0; i < plain->count; i++) {
        if (movers >> i & 1) {
            const uint64_t item = plain->items[i];
            if (item_list_add(work, packed_item(carried_of(item), t->out[item_position(item)])) < 0) {
                result = -2;
                goto done;
            }
        }
    }
    /* The closure: what epsilon moves and returns from calls reach, all plain. */
    while (work->size) {
        const uint64_t item = work->values[--work->size];
        const int added = item_seen_add(seen, item);
        if (added <= 0) {
            if (added < 0) {
                result = -2;
                goto done;
            }
            continue;
        }
        const int32_t origin = item_origin(item), count_tag = item_count_tag(item);
        const int32_t *reached;
        int32_t reached_count;
        if (local_closure(t, item_position(item), &reached, &reached_count) < 0) {
            result = -2;
            goto done;
        }
        for (int32_t j = 0; j < reached_count; j++) {
            const int32_t q = reached[j];
            int status;
            if (plain_position(t, q)) {
                status = item_list_add(closed, packed_item(carried_of(item), q));
            } else if (t->kind[q] == K_END && origin != 0) {
                status = plain_returns(t, origin, t->arg[q], work);
            } else if (t->kind[q] == K_COUNT_ENTER || t->kind[q] == K_COUNT_HUB) {
                status = plain_count_moves(t, q, origin, count_tag, work);
            } else {
                status = 1;  /* a call, a watch, an except! or intersection: the general way's */
            }
            if (status != 0) {
                result = status < 0 ? -2 : PLAIN_GENERAL_SUCCESSOR;
                goto done;
            }
        }
    }
    const int32_t count = sorted_distinct(closed->values, (int32_t)closed->size);
    if (count == 0) {
        result = -1;
        goto done;
    }
    if (count > PLAIN_MAX_ITEMS || count > t->max_items) {
        goto done;  /* PLAIN_GENERAL_SUCCESSOR */
    }
    /* Known, or new: interned in plain form, its Python items made only if asked for. */
    const long config = intern_plain(t, closed->values, count);
    if (config == -1) {
        result = -2;
    } else if (config < 0) {
        result = PLAIN_GENERAL_SUCCESSOR;  /* past max_configs: the general way raises */
    } else {
        result = config;
    }

done:
    if (scratch == &nested) {
        plain_scratch_free(&nested);
    } else {
        scratch->busy = 0;
    }
    return result;
}
/* A row is filled one byte at a time until this many of its entries are known: past it the
 * row's scan pays, one successor filling every byte of a part. */
#define FEW_KNOWN_ENTRIES 4

/* Whether a row's entry for ``byte`` is to be made from that byte's items alone: not known
 * yet, and few of the row's entries known. */
static int by_byte_alone(const int32_t *row, int byte) {
    int known = 0;
    for (int b = 0; b < 256; b++) {
        known += row[b] != UNKNOWN;
    }
    return row[byte] == UNKNOWN && known < FEW_KNOWN_ENTRIES;
}

/* The successor of ``plain`` by ``byte`` from the items whose byte sets hold it, without
 * splitting its row: for a configuration the trie walk passes through by a byte or two (a
 * key's prefix, a place deep inside tokens), where the split and its part's other bytes
 * cost more than the entries read. The items moved are those of the byte's part, so the
 * successor is the one the split would give. As ``plain_successor`` answers. */
static long plain_byte_successor(NfaTables *t, const PlainConfig *plain, int byte) {
    int32_t masks[PLAIN_MAX_ITEMS];
    if (plain_item_masks(t, plain, masks) < 0) {
        return -2;
    }
    uint64_t movers = 0;
    for (int32_t i = 0; i < plain->count; i++) {
        if (masks[i] >= 0 && (t->mask_bits[masks[i]][byte >> 3] >> (byte & 7) & 1)) {
            movers |= (uint64_t)1 << i;
        }
    }
    return movers ? plain_successor(t, plain, movers) : -1;
}

/* Fill the unknown entries of ``config``'s row for byte ``only`` (when not negative), else
 * for the bytes below ``end`` flagged in ``wanted`` (every one with NULL), with their
 * parts, when the configuration is plain: PLAIN_DONE, PLAIN_GENERAL when the general way
 * must fill (some of) them (what is written stays: the same successors), or PLAIN_ERROR.
 * With ``need_room``, no part is filled while the table has no spare row for a new
 * configuration (the general way returns for Python to grow it). With ``byte_alone``, the
 * entry of ``only`` in a row not split yet, few of its entries known, is made alone
 * (``plain_byte_successor``). */
static int plain_fill(NfaTables *t, long config, int only, int end, const uint8_t *wanted, int need_room,
                      int byte_alone) {
    if (config < 0 || config >= PyList_GET_SIZE(t->configs)) {
        return PLAIN_GENERAL;
    }
    PlainConfig *plain = plain_config_of(t, config);
    if (plain == NULL) {
        return PLAIN_ERROR;
    }
    if (plain == NOT_PLAIN) {
        return PLAIN_GENERAL;
    }
    int32_t *row;
    const int has_row = row_of(t, config, &row);
    if (has_row <= 0) {
        return has_row < 0 ? PLAIN_ERROR : PLAIN_GENERAL;
    }
    const Py_buffer *table = &t->table_buffer;
    if (only >= 0 && row[only] != UNKNOWN) {
        return PLAIN_DONE;
    }
    if (plain->row_state == PLAIN_ROW_WRITTEN) {
        return PLAIN_DONE;
    }
    if (byte_alone && only >= 0 && plain->row_state == PLAIN_ROW_UNSPLIT && by_byte_alone(row, only)) {
        const long successor = plain_byte_successor(t, plain, only);
        if (successor == -2) {
            return PLAIN_ERROR;
        }
        if (successor == PLAIN_GENERAL_SUCCESSOR) {
            return PLAIN_GENERAL;
        }
        /* Interning never replaces the table (a caller grows it for a configuration past
         * its end afterwards): the row is where it was. */
        row[only] = (int32_t)successor;
        return PLAIN_DONE;
    }
    if (plain->row_state == PLAIN_ROW_UNSPLIT) {
        if (plain_split(t, plain) < 0) {
            return PLAIN_ERROR;
        }
        if (plain->row_state == PLAIN_ROW_UNSPLIT) {
            return PLAIN_GENERAL;
        }
        for (int b = 0; b < 256; b++) {
            if (plain->split->part_of_byte[b] == PLAIN_NO_PART && row[b] == UNKNOWN) {
                row[b] = DEAD;
            }
        }
        if (plain->parts_left == 0) {
            plain->row_state = PLAIN_ROW_WRITTEN;
            plain_drop_split(plain);
            return PLAIN_DONE;
        }
    }
    const int first = only >= 0 ? only : 0, last = only >= 0 ? only + 1 : end;
    for (int b = first; b < last; b++) {
        if (row[b] != UNKNOWN || (only < 0 && wanted != NULL && !wanted[b])) {
            continue;
        }
        if (need_room && PyList_GET_SIZE(t->configs) >= table->shape[0]) {
            return PLAIN_GENERAL;
        }
        const uint8_t part = plain->split->part_of_byte[b];
        const long successor = plain_successor(t, plain, plain_movers(plain, part));
        if (successor == -2) {
            return PLAIN_ERROR;
        }
        if (successor == PLAIN_GENERAL_SUCCESSOR) {
            return PLAIN_GENERAL;
        }
        for (int w = 0; w < 4; w++) {
            for (uint64_t bits = plain->split->part_bytes[part][w]; bits; bits &= bits - 1) {
                row[w * 64 + __builtin_ctzll(bits)] = (int32_t)successor;
            }
        }
        if (--plain->parts_left == 0) {
            break;
        }
    }
    /* Every part written, here or (some) by the general way before: the split is done with. */
    if (plain->parts_left == 0 || (only < 0 && end == 256 && wanted == NULL)) {
        plain->row_state = PLAIN_ROW_WRITTEN;
        plain_drop_split(plain);
    }
    return PLAIN_DONE;
}

/* How many of a row's entries below ``end`` lead somewhere live. */
static int live_entries(const int32_t *row, int end) {
    int live = 0;
    for (int b = 0; b < end; b++) {
        live += row[b] >= 0;
    }
    return live;
}

/* ``plain_fill`` of one byte's entry: PLAIN_DONE with the entry in ``result``, PLAIN_ERROR
 * with ``result`` NULL, or PLAIN_GENERAL. */
static int plain_entry(NfaTables *t, long config, int byte, int byte_alone, PyObject **result) {
    const int status = plain_fill(t, config, byte, 0, NULL, 0, byte_alone);
    if (status == PLAIN_DONE) {
        *result = PyLong_FromLong(((const int32_t *)t->table_buffer.buf)[(Py_ssize_t)config * 256 + byte]);
        return *result == NULL ? PLAIN_ERROR : PLAIN_DONE;
    }
    return status;
}

/* ``entry`` on bound tables (``byte`` in 0..255), with the automaton's lock held. */
static PyObject *entry_locked(NfaTables *t, long config, int byte, const uint8_t *wanted) {
    (void)wanted;
    PyObject *plain_result = NULL;
    if (plain_entry(t, config, byte, 0, &plain_result) != PLAIN_GENERAL) {
        return plain_result;
    }
    RowWork work;
    PyObject *result = NULL;
    switch (open_row(t, config, byte, "entry", &work)) {
    case ROW_KNOWN:
        result = PyLong_FromLong(work.row[byte]);
        break;
    case ROW_PYTHON:
        Py_INCREF(Py_None);
        result = Py_None;
        break;
    case ROW_READY:
        /* A byte of no part is dead in the fresh row. */
        result = work.part_of_byte[byte] < 0 ? PyLong_FromLong(work.row[byte])
                                             : fill_part(t, &work, work.part_of_byte[byte]);
        break;
    }
    close_row(&work);
    return result;
}

enum { BYTE_ENTRY_ERROR = -1, BYTE_ENTRY_MADE, BYTE_ENTRY_BY_PART };

/* The successor of ``config`` by ``byte`` alone, from the items whose byte sets hold it,
 * written to the row: for a configuration the trie walk passes through by a byte or two (a
 * key's prefix, a place deep inside tokens), where a plain scan of every item by byte set,
 * their sort and the byte partition cost more than the entries read. BYTE_ENTRY_MADE with
 * what ``entry`` returns in ``result``; BYTE_ENTRY_BY_PART when the row takes its scan
 * instead (enough entries known, or an item the plain scan refuses); BYTE_ENTRY_ERROR with
 * an exception set. The kernel is the one the byte's part would have: the same successor. */
static int byte_entry_locked(NfaTables *t, long config, int byte, PyObject **result) {
    if (config < 0 || config >= PyList_GET_SIZE(t->configs) || byte < 0 || byte > 255) {
        return BYTE_ENTRY_BY_PART;  /* which raises */
    }
    int32_t *row;
    const int has_row = row_of(t, config, &row);
    if (has_row <= 0) {
        return has_row < 0 ? BYTE_ENTRY_ERROR : BYTE_ENTRY_BY_PART;
    }
    if (!by_byte_alone(row, byte)) {
        return BYTE_ENTRY_BY_PART;
    }
    PyObject *kernel = PyFrozenSet_New(NULL), *iterator = NULL, *item;
    SelfOrigin self_origin = {NULL, NULL};
    int any_tracked = 0, status = BYTE_ENTRY_MADE;
    PyObject *items = kernel == NULL ? NULL : config_items(t, config);
    if (items == NULL || (iterator = PyObject_GetIter(items)) == NULL) {
        status = BYTE_ENTRY_ERROR;
    }
    while (status == BYTE_ENTRY_MADE && (item = PyIter_Next(iterator)) != NULL) {
        int32_t p;
        PyObject *origin, *state;
        const int read = plain_scan_of_item(t, item, config, &self_origin, &p, &origin, &state);
        int32_t mask = read == SCAN_TAKE ? mask_index(t, p) : 0;
        if (read == SCAN_ERROR || mask < 0) {
            status = BYTE_ENTRY_ERROR;
        } else if (read == SCAN_REFUSE) {
            status = BYTE_ENTRY_BY_PART;
        } else if (read == SCAN_TAKE && (t->mask_bits[mask][byte >> 3] >> (byte & 7) & 1)) {
            PyObject *scanned = item_of(t, t->out[p], origin, Py_None, state);
            if (scanned == NULL || add_item(kernel, scanned, &any_tracked) < 0) {
                status = BYTE_ENTRY_ERROR;
            }
            Py_XDECREF(scanned);
        }
        Py_DECREF(item);
    }
    if (status == BYTE_ENTRY_MADE && PyErr_Occurred()) {
        status = BYTE_ENTRY_ERROR;
    }
    Py_XDECREF(iterator);
    Py_XDECREF(self_origin.origin);
    if (status != BYTE_ENTRY_MADE) {
        Py_XDECREF(kernel);
        return status;
    }
    PyObject *found = successor_of_kernel(t, kernel, any_tracked);
    if (found == NULL) {
        return BYTE_ENTRY_ERROR;
    }
    if (found != Py_None) {
        const long successor = PyLong_AsLong(found);
        if (successor >= -1) {
            /* Interning never replaces the table (a caller grows it for a configuration
             * past its end afterwards): the row is where it was. */
            row[byte] = (int32_t)successor;
        }
    }
    *result = found;
    return BYTE_ENTRY_MADE;
}

/* ``entry_locked`` by the byte alone while few of the row's entries are known (see
 * ``byte_entry_locked``). */
static PyObject *few_entries_locked(NfaTables *t, long config, int byte, const uint8_t *wanted) {
    PyObject *plain_result = NULL;
    if (plain_entry(t, config, byte, 1, &plain_result) != PLAIN_GENERAL) {
        return plain_result;
    }
    PyObject *result = NULL;
    switch (byte_entry_locked(t, config, byte, &result)) {
    case BYTE_ENTRY_MADE:
        return result;
    case BYTE_ENTRY_ERROR:
        return NULL;
    default:
        return entry_locked(t, config, byte, wanted);
    }
}

/* What ``fill_row`` answers for a filled row: how many entries below ``end`` lead somewhere
 * live, or with ``only_live`` the one byte below ``end`` that does (-1 when not exactly one). */
static PyObject *row_answer(const int32_t *row, int end, int only_live) {
    if (!only_live) {
        return PyLong_FromLong(live_entries(row, end));
    }
    int found = -1;
    for (int b = 0; b < end; b++) {
        if (row[b] >= 0) {
            if (found >= 0) {
                return PyLong_FromLong(-1);
            }
            found = b;
        }
    }
    return PyLong_FromLong(found);
}

/* Fill every entry of a plain-scan row not filled yet (``ByteAutomaton._compute_row_locked``),
 * or those below ``end``, or (``wanted`` not NULL: 256 flags) those of the flagged bytes:
 * ``row_answer`` of the row, or None when Python must finish the row (no plain scan, a
 * partition not made, a closure meeting an intersection, no spare table row for a new
 * configuration, or a limit exceeded, which Python raises). Under the tables' lock. */
static PyObject *filled_row(NfaTables *t, long config, int end, const uint8_t *wanted, int only_live) {
    const int plain = plain_fill(t, config, -1, end, wanted, 1, 0);
    if (plain == PLAIN_ERROR) {
        return NULL;
    }
    if (plain == PLAIN_DONE) {
        return row_answer((const int32_t *)t->table_buffer.buf + (Py_ssize_t)config * 256, end, only_live);
    }
    RowWork work;
    const int status = open_row(t, config, -1, "fill_row", &work);
    PyObject *result = status == ROW_READY ? Py_True : status == ROW_PYTHON ? Py_None : NULL;
    for (int first = 0; result == Py_True && first < end; first++) {
        const Py_ssize_t part = work.part_of_byte[first];
        if (part < 0 || work.row[first] != UNKNOWN || (wanted != NULL && !wanted[first])) {
            continue;  /* dead, its part filled, or not asked for */
        }
        if (PyList_GET_SIZE(t->configs) >= work.table->shape[0]) {
            result = Py_None;  /* no spare row: Python grows the table and finishes */
            break;
        }
        PyObject *found = fill_part(t, &work, part);
        if (found == NULL || found == Py_None || PyLong_AsLong(found) < -1) {
            result = found == NULL || PyErr_Occurred() ? NULL : Py_None;
        }
        Py_XDECREF(found);
    }
    if (result == Py_True) {
        /* Counted here, the row still at hand: the caller asking whether a configuration
         * goes on reads the count instead of the row. */
        PyObject *answer = row_answer(work.row, end, only_live);
        close_row(&work);
        return answer;
    }
    Py_XINCREF(result);
    close_row(&work);
    return result;
}

/* ``filled_row`` counting the live entries, in the shape ``locked`` calls. */
static PyObject *fill_row_locked(NfaTables *t, long config, int end, const uint8_t *wanted) {
    return filled_row(t, config, end, wanted, 0);
}

/* Take the tables' lock (``bind``'s): 0, -1 with an exception set. Configurations are
 * built by one thread at a time, whether here or in Python. */
static int tables_lock(NfaTables *t) {
    PyObject *acquired = PyObject_CallNoArgs(t->lock_acquire);
    Py_XDECREF(acquired);
    return acquired == NULL ? -1 : 0;
}

/* Release the tables' lock, keeping whatever exception is set; ``result`` back, or NULL
 * (``result`` dropped) when releasing fails. */
static PyObject *tables_unlock(NfaTables *t, PyObject *result) {
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
    PyObject *released = PyObject_CallNoArgs(t->lock_release);
    if (released == NULL) {
        Py_XDECREF(type); Py_XDECREF(value); Py_XDECREF(traceback);
        Py_XDECREF(result);
        return NULL;
    }
    Py_DECREF(released);
    PyErr_Restore(type, value, traceback);
    return result;
}

/* ------------------------------------------------------------------ multi-byte characters */

/* Whether every multi-byte UTF-8 character leads a configuration to the items an ASCII
 * byte leads it to (``ByteAutomaton._utf8_kernels_agree``), read off NFA positions without
 * building the configurations inside the characters. Items are packed as plain items are:
 * the position in the low bits, and above it what the walk through a character carries
 * unchanged (a plain item's origin and count, or a number ``utf8_agrees`` gives each
 * distinct origin and token state of a scan). */

/* One scanned item: the index of the byte set that scans it (in ``mask_bits``, which
 * ``mask_index`` may move) and the packed item it moves to. */
typedef struct {
    int32_t mask;
    uint64_t moved;
} ScanEntry;

/* The items any byte of low..high moves ``entries`` to, sorted and distinct in ``out``: 1,
 * 0 when the range splits a byte set (no single answer). */
static int scanned_by_range(const NfaTables *t, const ScanEntry *entries, Py_ssize_t count, int low, int high,
                            ItemList *out) {
    out->size = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        const int meets = range_meets(t->mask_bits[entries[i].mask], low, high);
        if (meets == RANGE_SPLIT) {
            return 0;
        }
        if (meets == RANGE_HELD && item_list_add(out, entries[i].moved) < 0) {
            return -1;
        }
    }
    out->size = sorted_distinct(out->values, (int32_t)out->size);
    return 1;
}

/* The items any byte of low..high moves ``kernel``'s closure to, as ``scanned_by_range``,
 * when that closure reaches only plain byte positions (else 0; as
 * ``ByteAutomaton._plain_kernel_after``). */
static int closed_by_range(NfaTables *t, const ItemList *kernel, int low, int high, ItemList *out) {
    out->size = 0;
    for (Py_ssize_t i = 0; i < kernel->size; i++) {
        const int32_t *reached;
        int32_t reached_count;
        if (local_closure(t, item_position(kernel->values[i]), &reached, &reached_count) < 0) {
            return -1;
        }
        for (int32_t k = 0; k < reached_count; k++) {
            const int32_t q = reached[k];
            if (t->kind[q] != K_BYTE || t->arg[q] >= 0) {
                return 0;
            }
            const int32_t index = mask_index(t, q);
            if (index < 0) {
                return -1;
            }
            const int meets = range_meets(t->mask_bits[index], low, high);
            if (meets == RANGE_SPLIT) {
                return 0;
            }
            if (meets == RANGE_HELD && item_list_add(out, packed_item(carried_of(kernel->values[i]), t->out[q])) < 0) {
                return -1;
            }
        }
    }
    out->size = sorted_distinct(out->values, (int32_t)out->size);
    return 1;
}

/* A (low, high) byte range of ``utf8_agrees``'s forms (read without PyArg_ParseTuple: the
 * forms are read at every call); -1 with an exception set when it is not one. */
static int byte_range(PyObject *pair, int *low, int *high) {
    if (PyTuple_Check(pair) && PyTuple_GET_SIZE(pair) == 2) {
        const long first = PyLong_AsLong(PyTuple_GET_ITEM(pair, 0));
        const long last = PyLong_AsLong(PyTuple_GET_ITEM(pair, 1));
        if (!PyErr_Occurred() && 0 <= first && first <= last && last <= 255) {
            *low = (int)first;
            *high = (int)last;
            return 0;
        }
    }
    if (!PyErr_Occurred()) {
        PyErr_SetString(PyExc_ValueError, "utf8_agrees: a range is not a (low, high) byte range");
    }
    return -1;
}

/* Whether every form of ``forms`` (lead byte range, continuation ranges) leads ``entries``
 * where ``ascii_byte`` does: 1, 0, -1 on error. */
static int characters_agree(NfaTables *t, const ScanEntry *entries, Py_ssize_t count, int ascii_byte, PyObject *forms) {
    ItemList lists[3] = {{NULL, 0, 0}, {NULL, 0, 0}, {NULL, 0, 0}};
    ItemList *target = &lists[0];
    int agrees = scanned_by_range(t, entries, count, ascii_byte, ascii_byte, target);
    if (agrees > 0 && target->size == 0) {
        agrees = 0;
    }
    for (Py_ssize_t f = 0; agrees > 0 && f < PyTuple_GET_SIZE(forms); f++) {
        PyObject *form = PyTuple_GET_ITEM(forms, f), *continuations;
        int lead_low, lead_high;
        if (!PyTuple_Check(form) || PyTuple_GET_SIZE(form) != 2 ||
            !PyTuple_Check(continuations = PyTuple_GET_ITEM(form, 1)) ||
            byte_range(PyTuple_GET_ITEM(form, 0), &lead_low, &lead_high) < 0) {
            if (!PyErr_Occurred()) {
                PyErr_SetString(PyExc_ValueError, "utf8_agrees: a form is not (lead range, continuation ranges)");
            }
            agrees = -1;
            break;
        }
        ItemList *kernel = &lists[1], *next = &lists[2];
        agrees = scanned_by_range(t, entries, count, lead_low, lead_high, kernel);
        for (Py_ssize_t c = 0; agrees > 0 && c < PyTuple_GET_SIZE(continuations); c++) {
            int low, high;
            if (byte_range(PyTuple_GET_ITEM(continuations, c), &low, &high) < 0) {
                agrees = -1;
            } else if (kernel->size == 0) {
                agrees = 0;  /* the character dies where the ASCII byte lives */
            } else if ((agrees = closed_by_range(t, kernel, low, high, next)) > 0) {
                ItemList *swap = kernel;
                kernel = next;
                next = swap;
            }
        }
        if (agrees > 0) {
            agrees = kernel->size == target->size &&
                     memcmp(kernel->values, target->values, (size_t)kernel->size * sizeof(uint64_t)) == 0;
        }
    }
    for (int i = 0; i < 3; i++) {
        free(lists[i].values);
    }
    return agrees;
}

const char utf8_agrees_doc[] = (
"utf8_agrees(tables, by_mask, ascii_byte, forms)\n"
"\n"
"As ``ByteAutomaton._utf8_kernels_agree`` given a configuration's scan ``by_mask``\n"
"(from ``plain_scans``): whether every UTF-8 form of ``forms`` (lead byte range,\n"
"continuation ranges) leads to the items ``ascii_byte`` leads to.");

PyObject *utf8_agrees(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *capsule, *by_mask, *forms;
    int ascii_byte;
    if (!PyArg_ParseTuple(args, "OO!iO!:utf8_agrees", &capsule, &PyDict_Type, &by_mask, &ascii_byte, &PyTuple_Type,
                          &forms)) {
        return NULL;
    }
    NfaTables *t = tables_of(capsule);
    if (t == NULL || check_bound(t, "utf8_agrees") < 0) {
        return NULL;
    }
    if (ascii_byte < 0 || ascii_byte > 255) {
        PyErr_SetString(PyExc_ValueError, "utf8_agrees: ascii_byte is not a byte");
        return NULL;
    }
    /* The scan's byte sets by index, and each distinct (origin, token state) numbered. */
    Py_ssize_t total = 0, count = 0, at = 0;
    PyObject *mask, *scanned;
    while (PyDict_Next(by_mask, &at, &mask, &scanned)) {
        if (!PyTuple_Check(scanned)) {
            PyErr_SetString(PyExc_TypeError, "scanned items are not a tuple");
            return NULL;
        }
        total += PyTuple_GET_SIZE(scanned);
    }
    /* Byte sets new to the tables are added to them: under their lock. */
    if (tables_lock(t) < 0) {
        return NULL;
    }
    ScanEntry *entries = (ScanEntry *)malloc((size_t)(total ? total : 1) * sizeof(ScanEntry));
    PyObject *numbers = PyDict_New();
    int agrees = entries == NULL || numbers == NULL ? -1 : 0, watched = 0;
    if (entries == NULL) {
        PyErr_NoMemory();
    }
    at = 0;
    while (agrees == 0 && !watched && PyDict_Next(by_mask, &at, &mask, &scanned)) {
        const int32_t index = mask_number(t, mask);
        if (index < 0) {
            agrees = -1;
            break;
        }
        for (Py_ssize_t j = 0; agrees == 0 && j < PyTuple_GET_SIZE(scanned); j++) {
            int32_t p;
            PyObject *o, *w, *state;
            if (unpack_item(t, PyTuple_GET_ITEM(scanned, j), &p, &o, &w, &state) < 0) {
                agrees = -1;
                break;
            }
            if (w != Py_None) {
                watched = 1;  /* a scan never holds one (``plain_scans``): no answer, so False */
                break;
            }
            PyObject *key = PyTuple_Pack(2, o, state), *number = key == NULL ? NULL : PyDict_GetItemWithError(numbers, key);
            long carried = number == NULL ? PyDict_GET_SIZE(numbers) : PyLong_AsLong(number);
            if (key == NULL || PyErr_Occurred()) {
                agrees = -1;
            } else if (number == NULL) {
                PyObject *made = PyLong_FromLong(carried);
                agrees = made == NULL || PyDict_SetItem(numbers, key, made) < 0 ? -1 : 0;
                Py_XDECREF(made);
            }
            Py_XDECREF(key);
            if (agrees == 0) {
                entries[count++] = (ScanEntry){index, packed_item((uint64_t)carried, p)};
            }
        }
    }
    if (agrees == 0 && !watched) {
        agrees = characters_agree(t, entries, count, ascii_byte, forms);
    }
    free(entries);
    Py_XDECREF(numbers);
    return tables_unlock(t, agrees < 0 ? NULL : PyBool_FromLong(agrees));
}

const char utf8_agrees_config_doc[] = (
"utf8_agrees_config(tables, config, ascii_byte, forms)\n"
"\n"
"``utf8_agrees`` read off a plain configuration's own items, without its scan: True or\n"
"False, or None when ``config`` is not plain (its scan answers).");

PyObject *utf8_agrees_config(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *capsule, *forms;
    long config;
    int ascii_byte;
    if (!PyArg_ParseTuple(args, "OliO!:utf8_agrees_config", &capsule, &config, &ascii_byte, &PyTuple_Type, &forms)) {
        return NULL;
    }
    NfaTables *t = tables_of(capsule);
    if (t == NULL || check_bound(t, "utf8_agrees_config") < 0) {
        return NULL;
    }
    if (ascii_byte < 0 || ascii_byte > 255 || config < 0 || config >= PyList_GET_SIZE(t->configs)) {
        PyErr_SetString(PyExc_ValueError, "utf8_agrees_config: no such configuration or byte");
        return NULL;
    }
    if (tables_lock(t) < 0) {
        return NULL;
    }
    PyObject *result = NULL;
    PlainConfig *plain = plain_config_of(t, config);
    if (plain == NOT_PLAIN) {
        result = Py_NewRef(Py_None);
    } else if (plain != NULL) {
        /* Its scanning items, each moved past its byte set (a plain item packs what it carries). */
        ScanEntry entries[PLAIN_MAX_ITEMS];
        int32_t masks[PLAIN_MAX_ITEMS];
        Py_ssize_t count = 0;
        int agrees = plain_item_masks(t, plain, masks);
        for (int32_t i = 0; i < plain->count && agrees == 0; i++) {
            if (masks[i] >= 0) {
                const uint64_t item = plain->items[i];
                entries[count++] = (ScanEntry){masks[i], packed_item(carried_of(item), t->out[item_position(item)])};
            }
        }
        if (agrees == 0) {
            agrees = characters_agree(t, entries, count, ascii_byte, forms);
        }
        result = agrees < 0 ? NULL : PyBool_FromLong(agrees);
    }
    return tables_unlock(t, result);
}

/* ``build`` under the automaton's lock. */
static PyObject *locked(NfaTables *t, PyObject *(*build)(NfaTables *, long, int, const uint8_t *), long config, int byte,
                        const uint8_t *wanted) {
    if (tables_lock(t) < 0) {
        return NULL;
    }
    return tables_unlock(t, build(t, config, byte, wanted));
}

PyObject *entry(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *capsule;
    long config;
    int byte, by_byte = 0;
    if (!PyArg_ParseTuple(args, "Oli|p:entry", &capsule, &config, &byte, &by_byte)) {
        return NULL;
    }
    NfaTables *t = tables_of(capsule);
    if (t == NULL || check_bound(t, "entry") < 0) {
        return NULL;
    }
    if (byte < 0 || byte > 255) {
        PyErr_SetString(PyExc_IndexError, "entry: no such configuration or byte");
        return NULL;
    }
    return locked(t, by_byte ? few_entries_locked : entry_locked, config, byte, NULL);
}

const char fill_row_doc[] = (
"fill_row(tables, config, end=256, values=None, only_live=False)\n"
"\n"
"Fills every entry of configuration ``config``'s row not filled yet, as\n"
"``ByteAutomaton._compute_row_locked`` for a row of plain scans, with the containers\n"
"given to ``bind``: how many entries below ``end`` lead somewhere live (unfilled ones\n"
"are not), or None when Python must finish the row. With ``end``, only the parts\n"
"holding a byte below it (the row stays incomplete); with ``values`` (a bytes-like\n"
"object of byte values), only the parts holding one of them. With ``only_live``, the answer\n"
"is the one byte below ``end`` that leads somewhere live, -1 when there is not exactly one.");

PyObject *fill_row(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *capsule;
    long config;
    int end = 256, only_live = 0;
    Py_buffer values = {0};
    if (!PyArg_ParseTuple(args, "Ol|iz*p:fill_row", &capsule, &config, &end, &values, &only_live)) {
        return NULL;
    }
    PyObject *result = NULL;
    uint8_t wanted[256] = {0};
    if (end < 0 || end > 256) {
        PyErr_SetString(PyExc_ValueError, "fill_row: end is not a byte count");
        goto done;
    }
    NfaTables *t = tables_of(capsule);
    if (t == NULL || check_bound(t, "fill_row") < 0) {
        goto done;
    }
    for (Py_ssize_t i = 0; i < values.len; i++) {
        wanted[((const uint8_t *)values.buf)[i]] = 1;
    }
    if (tables_lock(t) < 0) {
        goto done;
    }
    result = tables_unlock(t, filled_row(t, config, end, values.buf != NULL ? wanted : NULL, only_live));

done:
    if (values.obj != NULL) {
        PyBuffer_Release(&values);
    }
    return result;
}

const char successors_doc[] = (
"successors(tables, config, values, out)\n"
"\n"
"``ByteAutomaton.successors`` with the containers given to ``bind``: writes the successor\n"
"of ``config`` by each byte of ``values`` (a C-contiguous array of uint8 or int64 byte\n"
"values) to ``out`` (a writable int32 array as long), filling the parts of the row they\n"
"fall in first (as ``fill_row`` with those values). True, or None (``out`` unusable)\n"
"when Python must fill them.");

PyObject *successors(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *capsule;
    long config;
    Py_buffer values = {0}, out = {0};
    if (!PyArg_ParseTuple(args, "Oly*w*:successors", &capsule, &config, &values, &out)) {
        return NULL;
    }
    PyObject *result = NULL;
    const Py_ssize_t itemsize = values.itemsize > 0 ? values.itemsize : 1;
    const Py_ssize_t count = values.len / itemsize;
    NfaTables *t = tables_of(capsule);
    if (t == NULL || check_bound(t, "successors") < 0) {
        goto done;
    }
    if ((itemsize != 1 && itemsize != 8) || out.len != count * (Py_ssize_t)sizeof(int32_t)) {
        PyErr_SetString(PyExc_ValueError, "successors: values must be uint8 or int64, out int32 of as many");
        goto done;
    }
    if (config < 0 || config >= PyList_GET_SIZE(t->configs)) {
        PyErr_SetString(PyExc_IndexError, "successors: no such configuration");
        goto done;
    }
    uint8_t wanted[256] = {0};
    for (Py_ssize_t i = 0; i < count; i++) {
        const int64_t value = itemsize == 1 ? ((const uint8_t *)values.buf)[i] : ((const int64_t *)values.buf)[i];
        if (value < 0 || value > 255) {
            PyErr_SetString(PyExc_ValueError, "successors: a value is not a byte");
            goto done;
        }
        wanted[value] = 1;
    }
    for (int pass = 0; pass < 2 && result == NULL; pass++) {
        Py_buffer *table = table_view(t);
        if (table == NULL) {
            goto done;
        }
        if (config >= table->shape[0]) {
            PyErr_SetString(PyExc_IndexError, "successors: the table has no row for the configuration");
            goto done;
        }
        const int32_t *row = (const int32_t *)table->buf + (Py_ssize_t)config * 256;
        int unknown = 0;
        for (int b = 0; b < 256 && !unknown; b++) {
            unknown = wanted[b] && row[b] == UNKNOWN;
        }
        if (!unknown) {
            int32_t *written = (int32_t *)out.buf;
            for (Py_ssize_t i = 0; i < count; i++) {
                written[i] = row[itemsize == 1 ? ((const uint8_t *)values.buf)[i] : ((const int64_t *)values.buf)[i]];
            }
            result = Py_NewRef(Py_True);
        } else if (pass == 0) {
            PyObject *filled = locked(t, fill_row_locked, config, 256, wanted);
            if (filled == NULL) {
                goto done;
            }
            const int finished = filled != Py_None;
            Py_DECREF(filled);
            if (!finished) {
                result = Py_NewRef(Py_None);  /* Python grows the table or computes the row */
            }
        } else {
            result = Py_NewRef(Py_None);
        }
    }

done:
    PyBuffer_Release(&values);
    PyBuffer_Release(&out);
    return result;
}

/* ``plain``'s items with their counts moved on by ``by``, into ``shifted`` (sorted): how
 * many, or -1 when a count would outgrow the plain form. */
static int32_t plain_shifted(const PlainConfig *plain, int by, uint64_t shifted[PLAIN_MAX_ITEMS]) {
    for (int32_t i = 0; i < plain->count; i++) {
        const uint64_t item = plain->items[i];
        const int32_t tag = item_count_tag(item);
        if (tag > 0 && (int64_t)tag + by > PLAIN_MAX_COUNT_TAG) {
            return -1;
        }
        shifted[i] = tag > 0 ? plain_item(item_origin(item), tag + by, item_position(item)) : item;
    }
    return sorted_distinct(shifted, plain->count);
}

/* ``count_shifted`` of a configuration in plain form, its items' counts (which a plain item
 * carries) moved on by ``by`` without making its Python items; the new one interned in
 * plain form. As ``plain_successor`` answers. */
static long plain_count_shifted(NfaTables *t, const PlainConfig *plain, int by) {
    uint64_t shifted[PLAIN_MAX_ITEMS];
    const int32_t count = plain_shifted(plain, by, shifted);
    if (count < 0) {
        return PLAIN_GENERAL_SUCCESSOR;
    }
    const long config = intern_plain(t, shifted, count);
    return config == -1 ? -2 : config < 0 ? PLAIN_GENERAL_SUCCESSOR : config;
}

/* ``count_shifted`` with the automaton's lock held: ``by`` comes as ``locked``'s byte. */
static PyObject *count_shifted_locked(NfaTables *t, long config, int by, const uint8_t *wanted) {
    (void)wanted;
    const PlainConfig *plain = plain_config_of(t, config);
    if (plain == NULL) {
        return NULL;
    }
    if (plain != NOT_PLAIN) {
        const long found = plain_count_shifted(t, plain, by);
        if (found != PLAIN_GENERAL_SUCCESSOR) {
            return found == -2 ? NULL : PyLong_FromLong(found);
        }
    }
    PyObject *items = config_items(t, config);
    PyObject *shifted = items == NULL ? NULL : PyFrozenSet_New(NULL);
    PyObject *iterator = shifted == NULL ? NULL : PyObject_GetIter(items);
    PyObject *item, *result = NULL;
    int any_tracked = 0;
    if (iterator == NULL) {
        goto done;
    }
    while ((item = PyIter_Next(iterator)) != NULL) {
        int32_t position;
        PyObject *origin, *watch, *state, *moved = NULL;
        if (unpack_item(t, item, &position, &origin, &watch, &state) == 0) {
            if (PyLong_CheckExact(state)) {
                const long count = PyLong_AsLong(state);
                PyObject *counted = count == -1 && PyErr_Occurred() ? NULL : count_object(t, count + by);
                moved = counted == NULL ? NULL : item_of(t, position, origin, watch, counted);
                Py_XDECREF(counted);
            } else {
                moved = Py_NewRef(item);
            }
        }
        Py_DECREF(item);
        const int added = moved == NULL ? -1 : add_item(shifted, moved, &any_tracked);
        Py_XDECREF(moved);
        if (added < 0) {
            goto done;
        }
    }
    if (PyErr_Occurred()) {
        goto done;
    }
    if (!any_tracked) {
        PyObject_GC_UnTrack(shifted);  /* as ``plain_frozenset`` */
    }
    const long found = intern_items(t, shifted);
    result = found == -1 && PyErr_Occurred() ? NULL : PyLong_FromLong(found);

done:
    Py_XDECREF(iterator);
    Py_XDECREF(shifted);
    return result;
}

const char count_shifted_doc[] = (
"count_shifted(tables, config, by)\n"
"\n"
"As ``ByteAutomaton.count_shifted`` with the containers given to ``bind``: the\n"
"configuration of ``config``'s items with every repetition count (an int token state)\n"
"``by`` higher, interned if new. Returns its number, or -11 when interning would exceed\n"
"max_configs. The caller grows the table when the number is past its end.");

PyObject *count_shifted(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *capsule;
    long config;
    int by;
    if (!PyArg_ParseTuple(args, "Oli:count_shifted", &capsule, &config, &by)) {
        return NULL;
    }
    NfaTables *t = tables_of(capsule);
    if (t == NULL || check_bound(t, "count_shifted") < 0) {
        return NULL;
    }
    if (config < 0 || config >= PyList_GET_SIZE(t->configs) || by < 0) {
        PyErr_SetString(PyExc_IndexError, "count_shifted: no such configuration, or a negative shift");
        return NULL;
    }
    return locked(t, count_shifted_locked, config, by, NULL);
}

/* The bound tables of ``capsule`` when ``config`` is one of their configurations; NULL
 * with an exception set (an IndexError naming ``function`` for no such configuration). */
static NfaTables *tables_with_config(PyObject *capsule, long config, const char *function) {
    NfaTables *t = tables_of(capsule);
    if (t == NULL || check_bound(t, function) < 0) {
        return NULL;
    }
    if (config < 0 || config >= PyList_GET_SIZE(t->configs)) {
        PyErr_Format(PyExc_IndexError, "%s: no such configuration", function);
        return NULL;
    }
    return t;
}

const char items_doc[] = (
"items(tables, config)\n"
"\n"
"The items (a frozenset) of configuration ``config``, bound with ``bind``: a configuration\n"
"made in plain form gets them on first use.");

PyObject *configuration_items(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *capsule;
    long config;
    if (!PyArg_ParseTuple(args, "Ol:items", &capsule, &config)) {
        return NULL;
    }
    NfaTables *t = tables_with_config(capsule, config, "items");
    if (t == NULL || tables_lock(t) < 0) {
        return NULL;
    }
    /* Made under the lock, as configurations are built: one thread at a time. */
    return tables_unlock(t, Py_XNewRef(config_items(t, config)));
}

const char intern_doc[] = (
"intern(tables, items)\n"
"\n"
"As ``ByteAutomaton._intern`` with the containers given to ``bind`` (a configuration known\n"
"in plain form only is found too): the configuration's number, or -11 when interning\n"
"would exceed max_configs.");

static PyObject *intern_locked(NfaTables *t, PyObject *items) {
    const long config = intern_items(t, items);
    return config == -1 && PyErr_Occurred() ? NULL : PyLong_FromLong(config);
}

PyObject *intern_configuration(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *capsule, *items;
    if (!PyArg_ParseTuple(args, "OO!:intern", &capsule, &PyFrozenSet_Type, &items)) {
        return NULL;
    }
    NfaTables *t = tables_of(capsule);
    if (t == NULL || check_bound(t, "intern") < 0 || tables_lock(t) < 0) {
        return NULL;
    }
    return tables_unlock(t, intern_locked(t, items));
}

const char shifted_counts_doc[] = (
"shifted_counts(tables, config, successor)\n"
"\n"
"For ``ByteAutomaton.count_shift_span``, read off plain forms: the counts (a sorted list)\n"
"of ``config``'s counted items when ``successor`` holds exactly its items with every\n"
"count one higher, an empty list when it does not, None when either configuration has no\n"
"plain form.");

PyObject *shifted_counts(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *capsule;
    long config, successor;
    if (!PyArg_ParseTuple(args, "Oll:shifted_counts", &capsule, &config, &successor)) {
        return NULL;
    }
    NfaTables *t = tables_with_config(capsule, config, "shifted_counts");
    if (t == NULL || tables_with_config(capsule, successor, "shifted_counts") == NULL || tables_lock(t) < 0) {
        return NULL;
    }
    const PlainConfig *from = plain_config_of(t, config), *to = from == NULL ? NULL : plain_config_of(t, successor);
    if (to == NULL) {
        return tables_unlock(t, NULL);
    }
    if (from == NOT_PLAIN || to == NOT_PLAIN) {
        return tables_unlock(t, Py_NewRef(Py_None));
    }
    uint64_t shifted[PLAIN_MAX_ITEMS];
    const int32_t count = plain_shifted(from, 1, shifted);
    if (count < 0) {
        return tables_unlock(t, Py_NewRef(Py_None));
    }
    int32_t tags[PLAIN_MAX_ITEMS], num_tags = 0;
    for (int32_t i = 0; i < from->count; i++) {
        const int32_t tag = item_count_tag(from->items[i]);
        if (tag > 0) {
            tags[num_tags++] = tag;
        }
    }
    PyObject *result = PyList_New(0);
    if (result == NULL || num_tags == 0 || count != to->count ||
        memcmp(shifted, to->items, (size_t)count * sizeof(uint64_t)) != 0) {
        return tables_unlock(t, result);
    }
    qsort(tags, (size_t)num_tags, sizeof(int32_t), int32_order);
    for (int32_t i = 0; i < num_tags; i++) {
        if (i > 0 && tags[i] == tags[i - 1]) {
            continue;
        }
        PyObject *number = PyLong_FromLong(tags[i] - 1);
        if (number == NULL || PyList_Append(result, number) < 0) {
            Py_XDECREF(number);
            Py_DECREF(result);
            return tables_unlock(t, NULL);
        }
        Py_DECREF(number);
    }
    return tables_unlock(t, result);
}

int32_t native_entry(PyObject *tables, int32_t config, int32_t value, Py_ssize_t num_rows, int few_bytes_read) {
    if (!PyCapsule_IsValid(tables, CAPSULE_NAME)) {
        return NATIVE_ENTRY_ASK_PYTHON;
    }
    NfaTables *t = tables_of(tables);
    /* A new configuration must find its row: with none spare, Python grows the table. */
    if (t == NULL || t->configs == NULL || PyList_GET_SIZE(t->configs) >= num_rows || value < 0 || value > 255) {
        return NATIVE_ENTRY_ASK_PYTHON;
    }
    PyObject *found = locked(t, few_bytes_read ? few_entries_locked : entry_locked, config, value, NULL);
    if (found == NULL) {
        PyErr_Clear();  /* Python computes the entry again and raises what it raises */
        return NATIVE_ENTRY_ASK_PYTHON;
    }
    long after = found == Py_None ? NATIVE_ENTRY_ASK_PYTHON : PyLong_AsLong(found);
    Py_DECREF(found);
    /* Past a limit, Python computes the entry again and raises the grammar error. */
    return after < -1 || after >= num_rows ? NATIVE_ENTRY_ASK_PYTHON : (int32_t)after;
}

/* ------------------------------------------------------------------ row partitions */

/* The most byte sets ``partition`` splits by: each byte's membership is a 64-bit word. */
#define MAX_PARTITION_SETS 64

/* Parts in the order Python's refinement makes them (``automaton._partition``): of two
 * parts, the one holding the byte set of the lowest index where their memberships differ
 * comes first. */
static int membership_order(const void *left, const void *right) {
    const uint64_t a = *(const uint64_t *)left, b = *(const uint64_t *)right;
    if (a == b) {
        return 0;
    }
    const uint64_t differ = a ^ b;
    return (a & differ & (~differ + 1)) ? -1 : 1;
}

/* The index of a part among the sorted ``memberships`` (there is one). */
static Py_ssize_t part_index(const uint64_t *memberships, Py_ssize_t count, uint64_t membership) {
    Py_ssize_t low = 0, high = count - 1;
    while (low < high) {
        const Py_ssize_t middle = (low + high) / 2;
        if (membership_order(&memberships[middle], &membership) < 0) {
            low = middle + 1;
        } else {
            high = middle;
        }
    }
    return low;
}

/* The bytes of one part as an index of a table row: an int, a slice for a range, else a
 * list of ints (as ``automaton._row_index``); ``low``, ``high`` and ``count`` describe the
 * part's bytes. */
static PyObject *part_target(const Py_ssize_t *part_of_byte, Py_ssize_t part, int low, int high, int count) {
    if (count == 1) {
        return PyLong_FromLong(low);
    }
    if (high - low + 1 == count) {
        PyObject *start = PyLong_FromLong(low), *stop = PyLong_FromLong(high + 1);
        PyObject *range = start && stop ? PySlice_New(start, stop, NULL) : NULL;
        Py_XDECREF(start);
        Py_XDECREF(stop);
        return range;
    }
    PyObject *values = PyList_New(count);
    for (int b = low, i = 0; values != NULL && b <= high; b++) {
        if (part_of_byte[b] == part) {
            PyObject *value = PyLong_FromLong(b);
            if (value == NULL) {
                Py_CLEAR(values);
                break;
            }
            PyList_SET_ITEM(values, i++, value);
        }
    }
    return values;
}

const char partition_doc[] = (
"partition(masks)\n"
"\n"
"As ``automaton._partition`` for a tuple of at most 64 byte sets (256-bit ints), the\n"
"targets that are neither one byte nor a range as lists; None for more byte sets.");

PyObject *partition(PyObject *self, PyObject *masks) {
    (void)self;
    if (!PyTuple_Check(masks)) {
        PyErr_SetString(PyExc_TypeError, "partition: the byte sets are not a tuple");
        return NULL;
    }
    return split_bytes(masks);
}

static PyObject *split_bytes(PyObject *masks) {
    const Py_ssize_t num_masks = PyTuple_GET_SIZE(masks);
    if (num_masks > MAX_PARTITION_SETS) {
        Py_RETURN_NONE;
    }
    uint64_t membership[256] = {0};
    for (Py_ssize_t i = 0; i < num_masks; i++) {
        uint8_t bits[32];
        if (bits_of_int(PyTuple_GET_ITEM(masks, i), bits) < 0) {
            return NULL;
        }
        add_membership(bits, (int)i, membership);
    }
    uint64_t parts[256];
    Py_ssize_t num_parts = 0;
    for (int b = 0; b < 256; b++) {
        /* Byte sets are mostly ranges: a run of bytes with one membership is one entry. */
        if (membership[b] && (b == 0 || membership[b] != membership[b - 1])) {
            parts[num_parts++] = membership[b];
        }
    }
    if (num_parts) {
        qsort(parts, (size_t)num_parts, sizeof(uint64_t), membership_order);
        Py_ssize_t distinct = 1;
        for (Py_ssize_t i = 1; i < num_parts; i++) {
            if (parts[i] != parts[distinct - 1]) {
                parts[distinct++] = parts[i];
            }
        }
        num_parts = distinct;
    }
    Py_ssize_t part_of_byte[256];
    int16_t parts_as_values[256];
    int part_low[256], part_high[256], part_count[256] = {0};
    for (int b = 0; b < 256; b++) {
        Py_ssize_t part = -1;
        if (membership[b]) {
            /* A run of bytes with one membership is one part, searched for once. */
            part = b > 0 && membership[b] == membership[b - 1] ? part_of_byte[b - 1]
                                                               : part_index(parts, num_parts, membership[b]);
            if (part_count[part]++ == 0) {
                part_low[part] = b;
            }
            part_high[part] = b;
        }
        part_of_byte[b] = part;
        parts_as_values[b] = (int16_t)part;
    }
    PyObject *members = PyList_New(num_parts), *targets = PyList_New(num_parts);
    PyObject *result = NULL;
    if (members == NULL || targets == NULL) {
        goto done;
    }
    for (Py_ssize_t part = 0; part < num_parts; part++) {
        PyObject *holding = PyList_New(0),
                 *target = part_target(part_of_byte, part, part_low[part], part_high[part], part_count[part]);
        if (holding != NULL) {
            PyList_SET_ITEM(members, part, holding);
        }
        if (target != NULL) {
            PyList_SET_ITEM(targets, part, target);
        }
        if (holding == NULL || target == NULL) {
            goto done;
        }
        for (Py_ssize_t i = 0; i < num_masks; i++) {
            if ((parts[part] >> i) & 1) {
                PyObject *index = PyLong_FromSsize_t(i);
                int status = index == NULL ? -1 : PyList_Append(holding, index);
                Py_XDECREF(index);
                if (status < 0) {
                    goto done;
                }
            }
        }
    }
    result = Py_BuildValue("(y#OO)", (const char *)parts_as_values, (Py_ssize_t)sizeof(parts_as_values), members,
                           targets);

done:
    Py_XDECREF(members);
    Py_XDECREF(targets);
    return result;
}

/* ------------------------------------------------------------------ completion bounds */

/* ``ByteAutomaton.completion_bounds`` reads, per configuration, each item's static
 * distance to its rule's end, what a counted repetition still owes and the caller's
 * continuation: a few dictionary and list reads per item, once per new state a token
 * budget meets (hundreds per new mask). Here they are C arrays. */

#define BOUND_CAPSULE_NAME "surecall.engine._native.BoundTables"

typedef struct {
    Py_ssize_t size;            /* NFA positions */
    double *dist;               /* realizable bytes from each position to its rule's end */
    int32_t *counter_of;        /* the counted repetition whose body holds each position, -1: none */
    int32_t *owner;             /* each position's rule */
    Py_ssize_t num_counters;
    double *iteration_length;   /* bytes of one iteration along its shortest body path, inf: unknown */
    Py_ssize_t num_rules;
    PyObject **rule_keys;       /* (rule, None) at rule + 1: the continuation tables' keys, made on first use */
} BoundTables;

static void bound_tables_free(BoundTables *b) {
    if (b == NULL) {
        return;
    }
    free(b->dist);
    free(b->counter_of);
    free(b->owner);
    free(b->iteration_length);
    if (b->rule_keys != NULL) {
        for (Py_ssize_t r = 0; r < b->num_rules; r++) {
            Py_XDECREF(b->rule_keys[r]);
        }
        free(b->rule_keys);
    }
    free(b);
}

static void bound_capsule_destructor(PyObject *capsule) {
    bound_tables_free((BoundTables *)PyCapsule_GetPointer(capsule, BOUND_CAPSULE_NAME));
}

/* A list of numbers as doubles (ints or floats, inf included); -1 on failure. */
static int doubles_of(PyObject *list, Py_ssize_t count, double *out) {
    for (Py_ssize_t i = 0; i < count; i++) {
        const double value = PyFloat_AsDouble(PyList_GET_ITEM(list, i));
        if (value == -1.0 && PyErr_Occurred()) {
            return -1;
        }
        out[i] = value;
    }
    return 0;
}

const char bound_tables_doc[] = (
"bound_tables(dist, body_of, iterations, owner)\n"
"\n"
"The tables ``completion_bounds`` reads, from ``_RealizableDistances``: ``dist`` (per\n"
"position, ints or inf), ``body_of`` ({body position: counted repetition}), one\n"
"iteration's bytes of each repetition (or None), and each position's rule. The\n"
"iterations each repetition needs are the NFA tables' own.");

PyObject *bound_tables(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *dist, *body_of, *iterations, *owner;
    if (!PyArg_ParseTuple(args, "O!O!O!O!:bound_tables", &PyList_Type, &dist, &PyDict_Type, &body_of, &PyList_Type,
                          &iterations, &PyList_Type, &owner)) {
        return NULL;
    }
    const Py_ssize_t size = PyList_GET_SIZE(dist), counters = PyList_GET_SIZE(iterations);
    if (PyList_GET_SIZE(owner) != size) {
        PyErr_SetString(PyExc_ValueError, "bound_tables: the lists disagree in length");
        return NULL;
    }
    BoundTables *b = (BoundTables *)calloc(1, sizeof(BoundTables));
    if (b == NULL) {
        return PyErr_NoMemory();
    }
    b->size = size;
    b->num_counters = counters;
    b->dist = (double *)malloc(sizeof(double) * (size_t)(size ? size : 1));
    b->counter_of = (int32_t *)malloc(sizeof(int32_t) * (size_t)(size ? size : 1));
    b->owner = (int32_t *)malloc(sizeof(int32_t) * (size_t)(size ? size : 1));
    b->iteration_length = (double *)malloc(sizeof(double) * (size_t)(counters ? counters : 1));
    if (b->dist == NULL || b->counter_of == NULL || b->owner == NULL || b->iteration_length == NULL) {
        bound_tables_free(b);
        return PyErr_NoMemory();
    }
    if (doubles_of(dist, size, b->dist) < 0) {
        goto fail;
    }
    long rules = 0;
    for (Py_ssize_t p = 0; p < size; p++) {
        const long rule = PyLong_AsLong(PyList_GET_ITEM(owner, p));
        if (rule == -1 && PyErr_Occurred()) {
            goto fail;
        }
        /* -1: the top level, whose positions no continuation table names (kept all the same). */
        if (rule < -1 || rule > INT32_MAX - 2) {
            PyErr_SetString(PyExc_ValueError, "bound_tables: a rule index out of range");
            goto fail;
        }
        b->owner[p] = (int32_t)rule;
        b->counter_of[p] = -1;
        rules = rule + 2 > rules ? rule + 2 : rules;
    }
    PyObject *key, *value;
    Py_ssize_t cursor = 0;
    while (PyDict_Next(body_of, &cursor, &key, &value)) {
        long position, counter;
        if (as_index(key, (long)size, &position) < 0 || as_index(value, (long)counters, &counter) < 0) {
            goto fail;
        }
        b->counter_of[position] = (int32_t)counter;
    }
    for (Py_ssize_t c = 0; c < counters; c++) {
        PyObject *iteration = PyList_GET_ITEM(iterations, c);
        if (iteration == Py_None) {
            b->iteration_length[c] = Py_HUGE_VAL;
        } else {
            const Py_ssize_t length = PyObject_Length(iteration);
            if (length < 0) {
                goto fail;
            }
            b->iteration_length[c] = (double)length;
        }
    }
    b->num_rules = rules;
    b->rule_keys = (PyObject **)calloc((size_t)(rules ? rules : 1), sizeof(PyObject *));
    if (b->rule_keys == NULL) {
        PyErr_NoMemory();
        goto fail;
    }
    PyObject *capsule = PyCapsule_New(b, BOUND_CAPSULE_NAME, bound_capsule_destructor);
    if (capsule == NULL) {
        goto fail;
    }
    return capsule;

fail:
    bound_tables_free(b);
    return NULL;
}

/* (rule, None), borrowed. */
static PyObject *continuation_key(BoundTables *b, int32_t rule) {
    if (b->rule_keys[rule + 1] == NULL) {
        b->rule_keys[rule + 1] = rule_key(rule, Py_None);
    }
    return b->rule_keys[rule + 1];
}

/* The bound of one configuration into ``*bound`` (inf: none known): 0, 1 where an
 * intersection needs Python's search, -1 on error. ``memo`` holds the continuation tables
 * already made, ``table_of(caller)`` makes one. */
static int config_bound(NfaTables *t, BoundTables *b, long config, PyObject *memo, PyObject *table_of, double *bound) {
    PyObject *items = config_items(t, config);
    PyObject *iterator = items == NULL ? NULL : PyObject_GetIter(items);
    if (iterator == NULL) {
        return -1;
    }
    double best = Py_HUGE_VAL;
    long table_caller = -1;
    PyObject *table = NULL, *item; /* table: a new reference */
    int status = 0;
    while (status == 0 && (item = PyIter_Next(iterator)) != NULL) {
        int32_t p;
        PyObject *origin, *watch, *state;
        if (unpack_item(t, item, &p, &origin, &watch, &state) < 0 || p >= b->size) {
            if (!PyErr_Occurred()) {
                PyErr_SetString(PyExc_ValueError, "completion_bounds: the tables are of another automaton");
            }
            status = -1;
        } else if (watch == Py_None) {
            if (t->kind[p] == K_ISECT) {
                status = 1;
            } else {
                double cost = b->dist[p];
                int skip = 0;
                if (state != Py_None) {
                    const int32_t counter = PyLong_CheckExact(state) ? b->counter_of[p] : -1;
                    if (counter < 0) {
                        skip = 1;
                    } else {
                        const long done = PyLong_AsLong(state);
                        if (done == -1 && PyErr_Occurred()) {
                            status = -1;
                        }
                        /* ``done`` iterations are done and this one is under way. */
                        const long owed = t->counter_low[counter] - done - 1;
                        if (owed > 0) {
                            cost += (double)owed * b->iteration_length[counter];
                        }
                    }
                }
                if (status == 0 && !skip && cost <= best && origin != Py_None) {
                    PyObject *call_watch;
                    long origin_config;
                    const int own = is_self_origin(origin, &call_watch, &origin_config);
                    if (own < 0) {
                        status = -1;
                    } else if (call_watch != Py_None) {
                        skip = 1;
                    } else {
                        const long caller = own ? config : origin_config;
                        if (table == NULL || caller != table_caller) {
                            Py_CLEAR(table);
                            PyObject *number = PyLong_FromLong(caller);
                            table = number == NULL ? NULL : PyDict_GetItemWithError(memo, number);
                            if (table != NULL) {
                                Py_INCREF(table);
                            } else if (number != NULL && !PyErr_Occurred()) {
                                table = PyObject_CallOneArg(table_of, number);
                            }
                            Py_XDECREF(number);
                            table_caller = caller;
                        }
                        PyObject *key = table == NULL ? NULL : continuation_key(b, b->owner[p]);
                        if (key == NULL || !PyDict_Check(table)) {
                            if (!PyErr_Occurred()) {
                                PyErr_SetString(PyExc_TypeError, "completion_bounds: a continuation table is not a dict");
                            }
                            status = -1;
                        } else {
                            PyObject *rest = PyDict_GetItemWithError(table, key);
                            if (rest == NULL) {
                                if (PyErr_Occurred()) {
                                    status = -1;
                                }
                                cost = Py_HUGE_VAL;
                            } else {
                                const double value = PyFloat_AsDouble(rest);
                                if (value == -1.0 && PyErr_Occurred()) {
                                    status = -1;
                                }
                                cost += value;
                            }
                        }
                    }
                }
                if (status == 0 && !skip && cost < best) {
                    best = cost;
                }
            }
        }
        Py_DECREF(item);
    }
    Py_XDECREF(table);
    Py_DECREF(iterator);
    if (status == 0 && PyErr_Occurred()) {
        status = -1;
    }
    *bound = best;
    return status;
}

const char completion_bounds_doc[] = (
"completion_bounds(tables, bound_tables, configs, bounds, memo, table_of, fallback)\n"
"\n"
"As ``ByteAutomaton.completion_bounds`` over the configurations the tables are bound to:\n"
"each of ``configs``' bound, read from ``bounds`` or computed and stored there (an int,\n"
"or inf where none is known). ``memo`` holds the realizable continuation tables by\n"
"configuration, ``table_of(config)`` makes a missing one; ``fallback(config)`` gives the\n"
"bound of a configuration holding an intersection (its shortest strings are searched in\n"
"Python).");

PyObject *completion_bounds(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *capsule, *bound_capsule, *configs, *bounds, *memo, *table_of, *fallback;
    if (!PyArg_ParseTuple(args, "OOO!O!O!OO:completion_bounds", &capsule, &bound_capsule, &PyList_Type, &configs,
                          &PyDict_Type, &bounds, &PyDict_Type, &memo, &table_of, &fallback)) {
        return NULL;
    }
    NfaTables *t = tables_of(capsule);
    BoundTables *b = (BoundTables *)PyCapsule_GetPointer(bound_capsule, BOUND_CAPSULE_NAME);
    if (t == NULL || b == NULL || check_bound(t, "completion_bounds") < 0) {
        return NULL;
    }
    if (b->size != t->size || b->num_counters != t->num_counters) {
        PyErr_SetString(PyExc_ValueError, "completion_bounds: the bound tables are of another automaton");
        return NULL;
    }
    const Py_ssize_t count = PyList_GET_SIZE(configs);
    PyObject *found = PyList_New(count);
    if (found == NULL) {
        return NULL;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *number = PyList_GET_ITEM(configs, i);
        PyObject *known = PyDict_GetItemWithError(bounds, number);
        if (known != NULL) {
            PyList_SET_ITEM(found, i, Py_NewRef(known));
            continue;
        }
        const long config = PyErr_Occurred() ? -1 : PyLong_AsLong(number);
        if (PyErr_Occurred() || config >= PyList_GET_SIZE(t->configs)) {
            if (!PyErr_Occurred()) {
                PyErr_SetString(PyExc_IndexError, "completion_bounds: no such configuration");
            }
            Py_DECREF(found);
            return NULL;
        }
        /* DEAD (any negative number) has no completion. */
        double bound = Py_HUGE_VAL;
        const int status = config < 0 ? 0 : config_bound(t, b, config, memo, table_of, &bound);
        PyObject *value = NULL;
        if (status == 0) {
            value = bound < Py_HUGE_VAL ? PyLong_FromDouble(bound) : PyFloat_FromDouble(Py_HUGE_VAL);
        } else if (status == 1) {
            value = PyObject_CallOneArg(fallback, number);
        }
        if (value == NULL || PyDict_SetItem(bounds, number, value) < 0) {
            Py_XDECREF(value);
            Py_DECREF(found);
            return NULL;
        }
        PyList_SET_ITEM(found, i, value);
    }
    return found;
}
