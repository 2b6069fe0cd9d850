/* Native trie walk for the matcher (optional: without it the matcher walks with numpy).
 *
 * A mask is the set of tokens whose bytes the automaton can read from a configuration.
 * The matcher finds them by walking the token trie while stepping the automaton's
 * transition table. In Python that walk costs a few array operations per trie level or
 * an interpreter round trip per node; here it is a table read per node.
 *
 * The automaton fills its table lazily: an entry not computed yet (-2) is asked of
 * ``automaton.step(config, byte)``, which computes it in Python and may grow the table
 * into a new array, so the table is read again from ``automaton.transition_table``.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "_native.h"

#define ROW_WIDTH 256
#define ROW_BYTES (ROW_WIDTH * (Py_ssize_t)sizeof(int32_t))

typedef struct {
    int32_t *data;
    Py_ssize_t size;
    Py_ssize_t capacity;
} IntList;

static int int_list_reserve(IntList *list, Py_ssize_t capacity) {
    if (capacity <= list->capacity) {
        return 0;
    }
    int32_t *grown = (int32_t *)realloc(list->data, (size_t)capacity * sizeof(int32_t));
    if (grown == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    list->data = grown;
    list->capacity = capacity;
    return 0;
}

/* Out of line: growing is the rare path of the walk's loop. */
static __attribute__((noinline)) int int_list_grow(IntList *list, Py_ssize_t extra) {
    Py_ssize_t needed = list->size + extra;
    Py_ssize_t doubled = list->capacity ? list->capacity * 2 : 1024;
    return int_list_reserve(list, doubled > needed ? doubled : needed);
}

/* Room for ``extra`` more values. */
#define MAKE_ROOM(list, extra) \
    ((list).size + (extra) <= (list).capacity ? 0 : int_list_grow(&(list), (extra)))

static void int_list_free(IntList *list) {
    free(list->data);
    list->data = NULL;
    list->size = list->capacity = 0;
}

static int get_int32_buffer(PyObject *object, Py_buffer *view, const char *name) {
    if (PyObject_GetBuffer(object, view, PyBUF_SIMPLE) < 0) {
        return -1;
    }
    if (view->len % (Py_ssize_t)sizeof(int32_t) != 0) {
        PyErr_Format(PyExc_ValueError, "%s is not an array of int32", name);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

/* The automaton's current table; ``view`` is released first when it holds an older one. */
static int refresh_table(PyObject *automaton, Py_buffer *view) {
    PyObject *table = PyObject_GetAttrString(automaton, "transition_table");
    if (table == NULL) {
        return -1;
    }
    if (view->obj == table) {
        Py_DECREF(table);
        return 0;
    }
    if (view->obj != NULL) {
        PyBuffer_Release(view);
    }
    int status = get_int32_buffer(table, view, "transition_table");
    Py_DECREF(table);
    if (status == 0 && view->len % ROW_BYTES != 0) {
        PyErr_SetString(PyExc_ValueError, "walk: transition_table rows are not 256 entries wide");
        PyBuffer_Release(view);
        return -1;
    }
    return status;
}

/* ``step(config, value)`` computed by the automaton; UNKNOWN with an exception set on failure. */
static int32_t compute_entry(PyObject *step, int32_t config, int32_t value) {
    PyObject *found = PyObject_CallFunction(step, "ii", (int)config, (int)value);
    if (found == NULL) {
        return UNKNOWN;
    }
    long after = PyLong_AsLong(found);
    Py_DECREF(found);
    if (after == -1 && PyErr_Occurred()) {
        return UNKNOWN;
    }
    if (after < DEAD || after > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "walk: automaton.step returned an invalid configuration");
        return UNKNOWN;
    }
    return (int32_t)after;
}

/* What the trie walks step through: the automaton's table, its ``step`` for entries not
 * computed yet, and its native tables, which compute most of those without Python. */
typedef struct {
    PyObject *automaton, *tables;
    PyObject *step, *utf8_agrees; /* the automaton's bound methods, looked up when first asked */
    Py_buffer table;
    Py_ssize_t num_rows;
} Stepper;

static int stepper_open(Stepper *stepper, PyObject *automaton) {
    stepper->automaton = automaton;
    if (refresh_table(automaton, &stepper->table) < 0) {
        return -1;
    }
    stepper->num_rows = stepper->table.len / ROW_BYTES;
    stepper->tables = PyObject_GetAttrString(automaton, "_native");
    if (stepper->tables == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_AttributeError)) {
            return -1;
        }
        PyErr_Clear();  /* an automaton without native tables: Python computes every entry */
    }
    return 0;
}

/* A trie node with at most this many children reads few bytes of its configuration's row. */
#define FEW_CHILDREN 3

/* The successor of ``config`` by ``value``, not in the table yet; UNKNOWN with an exception
 * set on failure. ``stepper->table`` may be a new (grown) table afterwards. ``few_bytes_read``
 * as ``native_entry`` takes it. */
static int32_t stepper_entry(Stepper *stepper, int32_t config, int32_t value, int few_bytes_read) {
    if (stepper->tables != NULL && stepper->tables != Py_None) {
        int32_t after = native_entry(stepper->tables, config, value, stepper->num_rows, few_bytes_read);
        if (after != NATIVE_ENTRY_ASK_PYTHON) {
            return after;
        }
    }
    /* Looked up when first needed: the native tables compute most entries. */
    if (stepper->step == NULL && (stepper->step = PyObject_GetAttrString(stepper->automaton, "step")) == NULL) {
        return UNKNOWN;
    }
    int32_t after = compute_entry(stepper->step, config, value);
    if (after == UNKNOWN || refresh_table(stepper->automaton, &stepper->table) < 0) {
        return UNKNOWN;
    }
    stepper->num_rows = stepper->table.len / ROW_BYTES;
    return after;
}

static void stepper_close(Stepper *stepper) {
    Py_XDECREF(stepper->step);
    Py_XDECREF(stepper->tables);
    Py_XDECREF(stepper->utf8_agrees);
    if (stepper->table.obj != NULL) {
        PyBuffer_Release(&stepper->table);
    }
}

/* The walk's output: token ids and the configuration after each, ``found`` of ``room`` used;
 * or, with ``words``, only the tokens' bits set in ``num_words`` packed words. */
typedef struct {
    int32_t *ids, *ends;
    Py_ssize_t found, room;
    uint32_t *words;
    Py_ssize_t num_words;
} WalkOutput;

/* Report ``tokens[first:last]`` as ending at ``after``; -1 with an exception set when the
 * range lies outside the ``num_tokens`` tokens or the output is full. */
static int report_tokens(const int32_t *tokens, int32_t first, int32_t last, Py_ssize_t num_tokens, int32_t after,
                         WalkOutput *output) {
    if (first >= last) {
        return 0;
    }
    if (first < 0 || last > num_tokens) {
        PyErr_SetString(PyExc_ValueError, "walk: a token range is out of range");
        return -1;
    }
    if (output->words != NULL) {
        uint32_t *words = output->words;
        const uint32_t limit = (uint32_t)(output->num_words * 32);
        for (int32_t k = first; k < last; k++) {
            const uint32_t id = (uint32_t)tokens[k];
            if (id >= limit) {
                PyErr_SetString(PyExc_ValueError, "walk: a token id lies past the output words");
                return -1;
            }
            words[id >> 5] |= (uint32_t)1 << (id & 31);
        }
        output->found += last - first;
        return 0;
    }
    if (output->found + (last - first) > output->room) {
        PyErr_SetString(PyExc_OverflowError, "walk: more tokens found than the output arrays hold");
        return -1;
    }
    for (int32_t k = first; k < last; k++) {
        output->ids[output->found] = tokens[k];
        output->ends[output->found++] = after;
    }
    return 0;
}

/* For the walk's subtree shortcut: per configuration met, the bytes found so far to lead
 * it back to itself and those found not to (256-bit sets), in an open-addressing table. */
typedef struct {
    int32_t config; /* -1: empty slot */
    uint64_t loops[4], leaves[4];
    int8_t characters_loop; /* every multi-byte character leads back: 0 not known yet, 1 yes, -1 no */
} LoopEntry;

typedef struct {
    LoopEntry *slots;
    Py_ssize_t capacity, used; /* capacity a power of two */
} LoopCache;

static int loop_cache_resize(LoopCache *cache, Py_ssize_t capacity) {
    LoopEntry *slots = (LoopEntry *)malloc((size_t)capacity * sizeof(LoopEntry));
    if (slots == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < capacity; i++) {
        slots[i].config = -1;
    }
    for (Py_ssize_t i = 0; i < cache->capacity; i++) {
        if (cache->slots[i].config >= 0) {
            Py_ssize_t j = ((uint32_t)cache->slots[i].config * 2654435761u) & (capacity - 1);
            while (slots[j].config >= 0) {
                j = (j + 1) & (capacity - 1);
            }
            slots[j] = cache->slots[i];
        }
    }
    free(cache->slots);
    cache->slots = slots;
    cache->capacity = capacity;
    return 0;
}

static LoopEntry *loop_entry(LoopCache *cache, int32_t config) {
    if ((cache->used + 1) * 4 > cache->capacity * 3 && loop_cache_resize(cache, cache->capacity ? cache->capacity * 2 : 64) < 0) {
        return NULL;
    }
    Py_ssize_t j = ((uint32_t)config * 2654435761u) & (cache->capacity - 1);
    while (cache->slots[j].config >= 0 && cache->slots[j].config != config) {
        j = (j + 1) & (cache->capacity - 1);
    }
    LoopEntry *entry = &cache->slots[j];
    if (entry->config < 0) {
        entry->config = config;
        memset(entry->loops, 0, sizeof(entry->loops));
        memset(entry->leaves, 0, sizeof(entry->leaves));
        entry->characters_loop = 0;
        cache->used++;
    }
    return entry;
}

/* What a walk works in: its frontier lists and loop cache. One set is kept between walks,
 * its room with it, since most walks are small and fresh lists cost a walk of a forced
 * literal as much as the walk itself; a walk starting while it is in use (another thread
 * entering during a Python call of this one) makes its own. */
typedef struct {
    IntList frontier_nodes, frontier_configs, next_nodes, next_configs;
    LoopCache loop_cache;
} WalkScratch;

static WalkScratch kept_scratch;
static int kept_scratch_busy;

/* Past this many entries a list is not kept for the next walk; past this many slots, a loop
 * cache (which the next walk empties slot by slot). */
#define KEPT_SCRATCH_ROOM 65536
#define KEPT_LOOP_SLOTS 1024

/* The scratch a walk starts with: the kept one, emptied, when free, else a fresh one. */
static WalkScratch walk_scratch_take(int *kept) {
    *kept = !kept_scratch_busy;
    if (!*kept) {
        WalkScratch fresh;
        memset(&fresh, 0, sizeof fresh);
        return fresh;
    }
    kept_scratch_busy = 1;
    WalkScratch scratch = kept_scratch;
    scratch.frontier_nodes.size = scratch.frontier_configs.size = 0;
    scratch.next_nodes.size = scratch.next_configs.size = 0;
    if (scratch.loop_cache.used) {
        for (Py_ssize_t i = 0; i < scratch.loop_cache.capacity; i++) {
            scratch.loop_cache.slots[i].config = -1;
        }
        scratch.loop_cache.used = 0;
    }
    return scratch;
}

static void int_list_keep_or_free(IntList *list, IntList *kept) {
    if (list->capacity > KEPT_SCRATCH_ROOM) {
        int_list_free(list);
    }
    *kept = *list;
}

/* Hand a walk's scratch back (``kept`` as ``walk_scratch_take`` set it), or free it. */
static void walk_scratch_give(WalkScratch *scratch, int kept) {
    if (!kept) {
        int_list_free(&scratch->frontier_nodes);
        int_list_free(&scratch->frontier_configs);
        int_list_free(&scratch->next_nodes);
        int_list_free(&scratch->next_configs);
        free(scratch->loop_cache.slots);
        return;
    }
    int_list_keep_or_free(&scratch->frontier_nodes, &kept_scratch.frontier_nodes);
    int_list_keep_or_free(&scratch->frontier_configs, &kept_scratch.frontier_configs);
    int_list_keep_or_free(&scratch->next_nodes, &kept_scratch.next_nodes);
    int_list_keep_or_free(&scratch->next_configs, &kept_scratch.next_configs);
    if (scratch->loop_cache.capacity > KEPT_LOOP_SLOTS) {
        free(scratch->loop_cache.slots);
        scratch->loop_cache = (LoopCache){0};
    }
    kept_scratch.loop_cache = scratch->loop_cache;
    kept_scratch_busy = 0;
}

/* Whether every multi-byte UTF-8 character leads the configuration of ``entry`` back to
 * itself, as ``automaton.utf8_agrees`` tells from an ASCII byte known to: 1, 0 (also when
 * no such byte is known yet, or the automaton cannot tell), or -1 with an exception set. */
static int characters_loop(Stepper *stepper, LoopEntry *entry) {
    if (entry->characters_loop) {
        return entry->characters_loop > 0;
    }
    const int w = entry->loops[0] ? 0 : 1;
    if (!entry->loops[w]) {
        return 0;
    }
    const int ascii_byte = w * 64 + __builtin_ctzll(entry->loops[w]);
    if (stepper->utf8_agrees == NULL &&
        (stepper->utf8_agrees = PyObject_GetAttrString(stepper->automaton, "utf8_agrees")) == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_AttributeError)) {
            return -1;
        }
        PyErr_Clear();
        entry->characters_loop = -1;
        return 0;
    }
    PyObject *agrees = PyObject_CallFunction(stepper->utf8_agrees, "ii", (int)entry->config, ascii_byte);
    if (agrees == NULL) {
        return -1;
    }
    const int truth = PyObject_IsTrue(agrees);
    Py_DECREF(agrees);
    if (truth < 0 || refresh_table(stepper->automaton, &stepper->table) < 0) {
        return -1;
    }
    stepper->num_rows = stepper->table.len / ROW_BYTES;
    entry->characters_loop = truth ? 1 : -1;
    return truth;
}

/* Whether every byte of ``bytes`` (a 256-bit set) leads ``config`` back to itself, computing
 * the entries it needs and stopping at the first that does not: 1, 0, or -1 with an
 * exception set. With ``whole_characters`` (the bytes below a node whose tokens go on in
 * whole, well-formed UTF-8 characters), its bytes past ASCII are asked of as characters
 * instead: whether every multi-byte character leads back. ``stepper->table`` may be a new
 * (grown) table afterwards. */
static int loops_on_all(Stepper *stepper, LoopCache *cache, int32_t config, const uint64_t bytes[4],
                        int whole_characters) {
    LoopEntry *entry = loop_entry(cache, config);
    if (entry == NULL) {
        return -1;
    }
    const int words = whole_characters ? 2 : 4;
    for (int w = 0; w < words; w++) {
        if (bytes[w] & entry->leaves[w]) {
            return 0;
        }
    }
    if (whole_characters && (bytes[2] | bytes[3]) && entry->characters_loop < 0) {
        return 0;
    }
    for (int w = 0; w < words; w++) {
        uint64_t unknown = bytes[w] & ~entry->loops[w];
        while (unknown) {
            const int value = w * 64 + __builtin_ctzll(unknown);
            const uint64_t bit = unknown & (~unknown + 1);
            unknown &= unknown - 1;
            int32_t after = ((const int32_t *)stepper->table.buf)[(Py_ssize_t)config * ROW_WIDTH + value];
            if (after == UNKNOWN && (after = stepper_entry(stepper, config, value, 0)) == UNKNOWN) {
                return -1;
            }
            if (after != config) {
                entry->leaves[w] |= bit;
                return 0;
            }
            entry->loops[w] |= bit;
        }
    }
    if (whole_characters && (bytes[2] | bytes[3])) {
        return characters_loop(stepper, entry);
    }
    return 1;
}

/* The token trie a walk reads, held by a capsule (``trie_tables``) with its arrays' views,
 * which live as long as it does: a walk takes them without asking each array again. */
#define TRIE_ARRAYS 10

/* Release the views of an opaque table's arrays (those taken). */
static void release_views(Py_buffer *views, int count) {
    for (int i = 0; i < count; i++) {
        if (views[i].obj != NULL) {
            PyBuffer_Release(&views[i]);
        }
    }
}

/* Views of ``arrays`` up to the first NULL: int32 where ``int32_names`` names the array,
 * bytes elsewhere; -1 with an exception set (the caller releases the views taken). */
static int take_views(PyObject *const *arrays, const char *const *int32_names, Py_buffer *views, int count) {
    for (int i = 0; i < count && arrays[i] != NULL; i++) {
        if ((int32_names[i] != NULL ? get_int32_buffer(arrays[i], &views[i], int32_names[i])
                                    : PyObject_GetBuffer(arrays[i], &views[i], PyBUF_SIMPLE)) < 0) {
            return -1;
        }
    }
    return 0;
}

typedef struct {
    Py_buffer views[TRIE_ARRAYS];
    const int32_t *child_start, *child_end, *token_start, *token_ids;
    const uint8_t *node_byte;
    Py_ssize_t num_nodes, num_tokens;
    /* The subtree shortcut's tables (all NULL when not given). */
    const uint64_t *below_bytes;
    const int32_t *below_start, *below_end, *depth_first;
    const uint8_t *whole_characters;
} TrieTables;

static const char *const TRIE_TABLES_NAME = "surecall._native.trie_tables";

static void trie_tables_free(TrieTables *trie) {
    release_views(trie->views, TRIE_ARRAYS);
    free(trie);
}

static void trie_tables_destructor(PyObject *capsule) {
    trie_tables_free((TrieTables *)PyCapsule_GetPointer(capsule, TRIE_TABLES_NAME));
}

PyDoc_STRVAR(trie_tables_doc,
"trie_tables(child_start, child_end, node_byte, token_start, token_ids[, below_bytes, below_start,\n"
"            below_end, depth_first, whole_characters])\n"
"\n"
"The token trie as ``walk`` reads it: an opaque object holding views of the arrays (int32\n"
"except ``node_byte``, uint8), checked once. With the trie's ``subtree_tables`` (below_bytes,\n"
"below_start, below_end, depth_first, whole_characters) as five more arguments, walks take\n"
"the subtree shortcut (see ``walk``).");

static PyObject *trie_tables(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *arrays[TRIE_ARRAYS] = {NULL};
    if (!PyArg_ParseTuple(args, "OOOOO|OOOOO:trie_tables", &arrays[0], &arrays[1], &arrays[2], &arrays[3],
                          &arrays[4], &arrays[5], &arrays[6], &arrays[7], &arrays[8], &arrays[9])) {
        return NULL;
    }
    if (arrays[5] != NULL && arrays[9] == NULL) {
        PyErr_SetString(PyExc_TypeError, "trie_tables: the subtree tables are five arrays");
        return NULL;
    }
    TrieTables *trie = (TrieTables *)calloc(1, sizeof(TrieTables));
    if (trie == NULL) {
        return PyErr_NoMemory();
    }
    /* node_byte, below_bytes and whole_characters are bytes; the others int32. */
    static const char *const names[TRIE_ARRAYS] = {"child_start", "child_end", NULL, "token_start", "token_ids",
                                                   NULL, "below_start", "below_end", "depth_first", NULL};
    if (take_views(arrays, names, trie->views, TRIE_ARRAYS) < 0) {
        trie_tables_free(trie);
        return NULL;
    }
    Py_buffer *views = trie->views;
    const Py_ssize_t num_nodes = views[0].len / (Py_ssize_t)sizeof(int32_t);
    if (views[1].len != views[0].len || views[2].len != num_nodes ||
        views[3].len != (num_nodes + 1) * (Py_ssize_t)sizeof(int32_t)) {
        PyErr_SetString(PyExc_ValueError, "trie_tables: trie arrays of inconsistent lengths");
        trie_tables_free(trie);
        return NULL;
    }
    if (arrays[5] != NULL && (views[5].len != num_nodes * 32 || views[6].len != views[0].len ||
                              views[7].len != views[0].len || views[8].len != views[4].len ||
                              views[9].len != num_nodes)) {
        PyErr_SetString(PyExc_ValueError, "trie_tables: subtree tables of inconsistent lengths");
        trie_tables_free(trie);
        return NULL;
    }
    trie->child_start = (const int32_t *)views[0].buf;
    trie->child_end = (const int32_t *)views[1].buf;
    trie->node_byte = (const uint8_t *)views[2].buf;
    trie->token_start = (const int32_t *)views[3].buf;
    trie->token_ids = (const int32_t *)views[4].buf;
    trie->num_nodes = num_nodes;
    trie->num_tokens = views[4].len / (Py_ssize_t)sizeof(int32_t);
    if (arrays[5] != NULL) {
        trie->below_bytes = (const uint64_t *)views[5].buf;
        trie->below_start = (const int32_t *)views[6].buf;
        trie->below_end = (const int32_t *)views[7].buf;
        trie->depth_first = (const int32_t *)views[8].buf;
        trie->whole_characters = (const uint8_t *)views[9].buf;
    }
    PyObject *capsule = PyCapsule_New(trie, TRIE_TABLES_NAME, trie_tables_destructor);
    if (capsule == NULL) {
        trie_tables_free(trie);
    }
    return capsule;
}

/* A token group's exits as ``walk`` reads them (``group_exits``): per exit, its trie node,
 * the characters before it (which start it begins from along a chain), its tail (up to 4
 * bytes after those characters) and the first byte of its token path. */
#define EXIT_ARRAYS 5
typedef struct {
    Py_buffer views[EXIT_ARRAYS];
    const int32_t *nodes, *start_of, *lengths;
    const uint8_t *tails, *first;
    Py_ssize_t count;
} GroupExits;

static const char *const GROUP_EXITS_NAME = "surecall._native.group_exits";

static void group_exits_free(GroupExits *exits) {
    release_views(exits->views, EXIT_ARRAYS);
    free(exits);
}

static void group_exits_destructor(PyObject *capsule) {
    group_exits_free((GroupExits *)PyCapsule_GetPointer(capsule, GROUP_EXITS_NAME));
}

PyDoc_STRVAR(group_exits_doc,
"group_exits(nodes, start_of, tails, lengths, first_bytes)\n"
"\n"
"A token group's exits as ``walk`` reads them (its ``exits`` argument): an opaque object\n"
"holding views of the arrays, checked once. Per exit: its trie node, the index of the start\n"
"it steps from (int32 each), its tail (uint8, 4 per exit) of ``lengths[i]`` bytes (int32)\n"
"and the first byte of its token path (uint8), as ``live_exits`` takes them.");

static PyObject *group_exits(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *arrays[EXIT_ARRAYS];
    if (!PyArg_ParseTuple(args, "OOOOO:group_exits", &arrays[0], &arrays[1], &arrays[2], &arrays[3], &arrays[4])) {
        return NULL;
    }
    GroupExits *exits = (GroupExits *)calloc(1, sizeof(GroupExits));
    if (exits == NULL) {
        return PyErr_NoMemory();
    }
    /* tails and first_bytes are bytes; the others int32. */
    static const char *const names[EXIT_ARRAYS] = {"nodes", "start_of", NULL, "lengths", NULL};
    if (take_views(arrays, names, exits->views, EXIT_ARRAYS) < 0) {
        group_exits_free(exits);
        return NULL;
    }
    Py_buffer *views = exits->views;
    const Py_ssize_t count = views[0].len / (Py_ssize_t)sizeof(int32_t);
    if (views[1].len != views[0].len || views[2].len != count * 4 || views[3].len != views[0].len ||
        views[4].len != count) {
        PyErr_SetString(PyExc_ValueError, "group_exits: arrays of inconsistent lengths");
        group_exits_free(exits);
        return NULL;
    }
    exits->nodes = (const int32_t *)views[0].buf;
    exits->start_of = (const int32_t *)views[1].buf;
    exits->tails = (const uint8_t *)views[2].buf;
    exits->lengths = (const int32_t *)views[3].buf;
    exits->first = (const uint8_t *)views[4].buf;
    exits->count = count;
    PyObject *capsule = PyCapsule_New(exits, GROUP_EXITS_NAME, group_exits_destructor);
    if (capsule == NULL) {
        group_exits_free(exits);
    }
    return capsule;
}

static int32_t run_tail(Stepper *stepper, int32_t config, const uint8_t *tail, int32_t length, const char *function);
static int32_t exit_after(Stepper *stepper, const int32_t *starts, Py_ssize_t num_starts, Py_ssize_t which,
                          const uint8_t *tail, int32_t length, const char *function);

/* A start of ``walk`` below ``node`` from ``config``, its tokens reported if ``report``;
 * -1 with an exception set when either is out of range or memory runs out. */
static int add_start(const TrieTables *trie, const Stepper *stepper, int32_t node, int32_t config, int report,
                     IntList *nodes, IntList *configs, WalkOutput *output) {
    if (node < 0 || node >= trie->num_nodes || config < 0 || config >= stepper->num_rows) {
        PyErr_SetString(PyExc_ValueError, "walk: start node or configuration out of range");
        return -1;
    }
    if (report && report_tokens(trie->token_ids, trie->token_start[node], trie->token_start[node + 1],
                                trie->num_tokens, config, output) < 0) {
        return -1;
    }
    if (MAKE_ROOM(*nodes, 1) < 0 || MAKE_ROOM(*configs, 1) < 0) {
        return -1;
    }
    nodes->data[nodes->size++] = node;
    configs->data[configs->size++] = config;
    return 0;
}

/* ``walk``'s starts where a token group leaves off: its exits live from ``starts`` (one, or
 * one per character count) but those whose first byte is flagged in ``excepted``, and the
 * root's children by the ``excepted`` bytes live from ``starts[0]``. */
static int add_group_starts(const TrieTables *trie, Stepper *stepper, const GroupExits *exits,
                            const int32_t *starts, Py_ssize_t num_starts, const uint8_t excepted[256],
                            IntList *nodes, IntList *configs, WalkOutput *output) {
    for (Py_ssize_t i = 0; i < exits->count; i++) {
        if (excepted[exits->first[i]]) {
            continue;
        }
        const int32_t after = exit_after(stepper, starts, num_starts, num_starts == 1 ? 0 : exits->start_of[i],
                                         exits->tails + i * 4, exits->lengths[i], "walk");
        if (after == UNKNOWN) {
            return -1;
        }
        if (after != DEAD && add_start(trie, stepper, exits->nodes[i], after, 1, nodes, configs, output) < 0) {
            return -1;
        }
    }
    for (int32_t child = trie->child_start[0]; child < trie->child_end[0]; child++) {
        const uint8_t value = trie->node_byte[child];
        if (!excepted[value]) {
            continue;
        }
        const int32_t after = run_tail(stepper, starts[0], &value, 1, "walk");
        if (after == UNKNOWN) {
            return -1;
        }
        if (after != DEAD && add_start(trie, stepper, child, after, 1, nodes, configs, output) < 0) {
            return -1;
        }
    }
    return 0;
}

PyDoc_STRVAR(walk_doc,
"walk(automaton, trie, start_nodes, start_configs, out_ids, out_ends, *, report_starts=False,\n"
"     marks=None, out_words=None)\n"
"\n"
"Walk the token trie (``trie_tables``) level by level below each (start node, start\n"
"configuration), stepping ``automaton.transition_table`` (int32 rows of 256: -1 dead, -2 not\n"
"computed, then computed through the automaton's native tables ``_native`` where they can,\n"
"else asked of ``automaton.step``). Tokens at the start nodes themselves are reported only\n"
"with ``report_starts``, ending at their start configurations. The token ids reached and\n"
"the configuration after each are written to the writable int32 buffers ``out_ids`` and\n"
"``out_ends``; returns how many (OverflowError when they hold too few).\n"
"\n"
"With the trie's subtree tables, a node whose every byte below leads its configuration\n"
"back to itself reports the tokens below it at once instead of walking them (in another\n"
"order); so does a node whose tokens go on in whole characters, when every ASCII byte below\n"
"and every multi-byte character lead back (``automaton.utf8_agrees``).\n"
"\n"
"With ``marks`` (uint8, one per trie node), the walk goes only where a node's mark is not 0,\n"
"and reports tokens (and takes subtrees at once) only at nodes marked 2; a node marked 1 is\n"
"passed through, its tokens left to the caller (a token group's members, known live).\n"
"\n"
"With ``out_words`` (a writable contiguous array of 32-bit words), each token found has its\n"
"bit set there (token i: bit ``i & 31`` of word ``i >> 5``) instead of being written to\n"
"``out_ids``/``out_ends`` (which may then be empty); the count returned is the same. A token\n"
"id past the words is a ValueError.\n"
"\n"
"With ``exits`` (``group_exits``: a token group's) and ``exit_starts`` (int32: the\n"
"configuration after 0, 1, ... characters of the group, or one for all), the walk also\n"
"starts where tokens leave the group: at each exit live from its start, and, for each byte\n"
"of ``excepted`` (uint8: first bytes whose characters leave the group at once), at the\n"
"root's child by it, live from ``exit_starts[0]``; exits whose token path starts with an\n"
"excepted byte are left out. The tokens at these starts are reported too.");

static PyObject *walk(PyObject *self, PyObject *args, PyObject *kwargs) {
    (void)self;
    static char *keywords[] = {"automaton", "trie", "start_nodes", "start_configs", "out_ids", "out_ends",
                               "report_starts", "marks", "out_words", "exits", "exit_starts", "excepted", NULL};
    int report_starts = 0;
    PyObject *automaton, *trie_obj, *start_nodes_obj, *start_configs_obj;
    PyObject *marks_obj = Py_None, *out_words_obj = Py_None;
    PyObject *exits_obj = Py_None, *exit_starts_obj = Py_None, *excepted_obj = Py_None;
    Py_buffer out_ids = {0}, out_ends = {0}, out_words = {0};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOOOw*w*|$pOOOOO:walk", keywords, &automaton, &trie_obj,
                                     &start_nodes_obj, &start_configs_obj, &out_ids, &out_ends, &report_starts,
                                     &marks_obj, &out_words_obj, &exits_obj, &exit_starts_obj, &excepted_obj)) {
        return NULL;
    }
    const TrieTables *trie = (const TrieTables *)PyCapsule_GetPointer(trie_obj, TRIE_TABLES_NAME);
    if (trie == NULL) {
        PyErr_Clear();
        PyErr_SetString(PyExc_TypeError, "walk: trie must be what trie_tables returns");
        PyBuffer_Release(&out_ids);
        PyBuffer_Release(&out_ends);
        return NULL;
    }
    Stepper stepper = {0};
    Py_buffer start_nodes_view = {0}, start_configs_view = {0}, marks_view = {0};
    Py_buffer exit_starts_view = {0}, excepted_view = {0};
    int scratch_kept;
    WalkScratch scratch = walk_scratch_take(&scratch_kept);
    IntList frontier_nodes = scratch.frontier_nodes, frontier_configs = scratch.frontier_configs;
    IntList next_nodes = scratch.next_nodes, next_configs = scratch.next_configs;
    LoopCache loop_cache = scratch.loop_cache;
    PyObject *result = NULL;

    if (get_int32_buffer(start_nodes_obj, &start_nodes_view, "start_nodes") < 0 ||
        get_int32_buffer(start_configs_obj, &start_configs_view, "start_configs") < 0 ||
        stepper_open(&stepper, automaton) < 0) {
        goto done;
    }
    const int32_t *child_start = trie->child_start;
    const int32_t *child_end = trie->child_end;
    const uint8_t *node_byte = trie->node_byte;
    const int32_t *token_start = trie->token_start;
    const int32_t *token_ids = trie->token_ids;
    const Py_ssize_t num_nodes = trie->num_nodes;
    const Py_ssize_t num_tokens = trie->num_tokens;
    const Py_ssize_t num_starts = start_nodes_view.len / (Py_ssize_t)sizeof(int32_t);
    WalkOutput output = {(int32_t *)out_ids.buf, (int32_t *)out_ends.buf, 0,
                         (out_ids.len < out_ends.len ? out_ids.len : out_ends.len) / (Py_ssize_t)sizeof(int32_t),
                         NULL, 0};
    if (out_words_obj != Py_None) {
        if (PyObject_GetBuffer(out_words_obj, &out_words, PyBUF_WRITABLE | PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0) {
            goto done;
        }
        if (out_words.itemsize != 4) {
            PyErr_SetString(PyExc_ValueError, "walk: out_words must be a contiguous array of 32-bit words");
            goto done;
        }
        output.words = (uint32_t *)out_words.buf;
        output.num_words = out_words.len / 4;
    }
    if (start_configs_view.len != start_nodes_view.len) {
        PyErr_SetString(PyExc_ValueError, "walk: start arrays of inconsistent lengths");
        goto done;
    }
    const int32_t *start_nodes = (const int32_t *)start_nodes_view.buf;
    const int32_t *start_configs = (const int32_t *)start_configs_view.buf;
    /* The subtree shortcut, when the trie has its tables. */
    const uint64_t *below_bytes = trie->below_bytes;
    const int32_t *below_start = trie->below_start, *below_end = trie->below_end, *depth_first = trie->depth_first;
    const uint8_t *whole_characters = trie->whole_characters;
    const uint8_t *marks = NULL;
    if (marks_obj != Py_None) {
        if (PyObject_GetBuffer(marks_obj, &marks_view, PyBUF_SIMPLE) < 0) {
            goto done;
        }
        if (marks_view.len != num_nodes) {
            PyErr_SetString(PyExc_ValueError, "walk: marks must hold one byte per trie node");
            goto done;
        }
        marks = (const uint8_t *)marks_view.buf;
    }
    if (int_list_reserve(&frontier_nodes, num_starts + 1) < 0 || int_list_reserve(&frontier_configs, num_starts + 1) < 0) {
        goto done;
    }
    for (Py_ssize_t i = 0; i < num_starts; i++) {
        if (add_start(trie, &stepper, start_nodes[i], start_configs[i], report_starts, &frontier_nodes,
                      &frontier_configs, &output) < 0) {
            goto done;
        }
    }
    if (exits_obj != Py_None) {
        const GroupExits *exits = (const GroupExits *)PyCapsule_GetPointer(exits_obj, GROUP_EXITS_NAME);
        if (exits == NULL) {
            PyErr_Clear();
            PyErr_SetString(PyExc_TypeError, "walk: exits must be what group_exits returns");
            goto done;
        }
        if (get_int32_buffer(exit_starts_obj, &exit_starts_view, "exit_starts") < 0) {
            goto done;
        }
        const Py_ssize_t num_exit_starts = exit_starts_view.len / (Py_ssize_t)sizeof(int32_t);
        if (num_exit_starts < 1) {
            PyErr_SetString(PyExc_ValueError, "walk: exit_starts is empty");
            goto done;
        }
        uint8_t excepted[256] = {0};
        if (excepted_obj != Py_None) {
            if (PyObject_GetBuffer(excepted_obj, &excepted_view, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0) {
                goto done;
            }
            if (excepted_view.itemsize != 1) {
                PyErr_SetString(PyExc_ValueError, "walk: excepted must be an array of bytes (uint8)");
                goto done;
            }
            for (Py_ssize_t i = 0; i < excepted_view.len; i++) {
                excepted[((const uint8_t *)excepted_view.buf)[i]] = 1;
            }
        }
        if (add_group_starts(trie, &stepper, exits, (const int32_t *)exit_starts_view.buf, num_exit_starts, excepted,
                             &frontier_nodes, &frontier_configs, &output) < 0) {
            goto done;
        }
    } else if (exit_starts_obj != Py_None || excepted_obj != Py_None) {
        PyErr_SetString(PyExc_TypeError, "walk: exit_starts and excepted go with exits");
        goto done;
    }

    /* Level by level: trie nodes are numbered breadth first with the children of a node
     * contiguous, so a level's frontier, kept in node order, reads the trie arrays front
     * to back instead of jumping around them as a depth-first walk would. */
    if (int_list_reserve(&next_nodes, 1024) < 0 || int_list_reserve(&next_configs, 1024) < 0) {
        goto done;
    }
    while (frontier_nodes.size) {
        next_nodes.size = next_configs.size = 0;
        for (Py_ssize_t i = 0; i < frontier_nodes.size; i++) {
            const int32_t node = frontier_nodes.data[i];
            const int32_t config = frontier_configs.data[i];
            const int32_t *row = (const int32_t *)stepper.table.buf + (Py_ssize_t)config * ROW_WIDTH;
            const int32_t children_end = child_end[node];
            if (MAKE_ROOM(next_nodes, children_end - child_start[node]) < 0 ||
                MAKE_ROOM(next_configs, children_end - child_start[node]) < 0) {
                goto done;
            }
            for (int32_t child = child_start[node]; child < children_end; child++) {
                const int mark = marks == NULL ? 2 : marks[child];
                if (mark == 0) {
                    continue;
                }
                const uint8_t value = node_byte[child];
                int32_t after = row[value];
                if (after == UNKNOWN) {
                    after = stepper_entry(&stepper, config, value, children_end - child_start[node] <= FEW_CHILDREN);
                    if (after == UNKNOWN) {
                        goto done;
                    }
                    row = (const int32_t *)stepper.table.buf + (Py_ssize_t)config * ROW_WIDTH;
                }
                if (after == DEAD) {
                    continue;
                }
                if ((uint32_t)after >= (uint32_t)stepper.num_rows) {
                    PyErr_SetString(PyExc_ValueError, "walk: transition table holds an out-of-range configuration");
                    goto done;
                }
                if (mark == 1) {
                    if (child_start[child] < child_end[child]) {
                        next_nodes.data[next_nodes.size++] = child;
                        next_configs.data[next_configs.size++] = after;
                    }
                    continue;
                }
                if (report_tokens(token_ids, token_start[child], token_start[child + 1], num_tokens, after, &output) < 0) {
                    goto done;
                }
                if (child_start[child] < child_end[child]) {
                    /* A configuration that the first byte below leads elsewhere is most of
                     * them: one table read rules the shortcut out before any lookup (past
                     * ASCII, below whole characters, the byte is not asked of alone). */
                    const uint8_t first_below = node_byte[child_start[child]];
                    int32_t first_after = ((const int32_t *)stepper.table.buf)[(Py_ssize_t)after * ROW_WIDTH + first_below];
                    int whole = 0;
                    if (below_bytes != NULL && first_after == UNKNOWN && first_below < 0x80) {
                        /* The next level reads this entry anyway; asking the shortcut first
                         * would compute the subtree's lowest byte, often no child's. */
                        first_after = stepper_entry(&stepper, after, first_below,
                                                    child_end[child] - child_start[child] <= FEW_CHILDREN);
                        if (first_after == UNKNOWN) {
                            goto done;
                        }
                        row = (const int32_t *)stepper.table.buf + (Py_ssize_t)config * ROW_WIDTH;
                    }
                    if (below_bytes != NULL &&
                        (first_after == after || first_after == UNKNOWN ||
                         (first_below >= 0x80 && whole_characters[child]))) {
                        whole = loops_on_all(&stepper, &loop_cache, after, below_bytes + (Py_ssize_t)child * 4,
                                             whole_characters[child]);
                        if (whole < 0) {
                            goto done;
                        }
                        row = (const int32_t *)stepper.table.buf + (Py_ssize_t)config * ROW_WIDTH;
                    }
                    if (whole) {
                        if (report_tokens(depth_first, below_start[child], below_end[child], num_tokens, after, &output) < 0) {
                            goto done;
                        }
                    } else {
                        next_nodes.data[next_nodes.size++] = child;
                        next_configs.data[next_configs.size++] = after;
                    }
                }
            }
        }
        IntList swap = frontier_nodes;
        frontier_nodes = next_nodes;
        next_nodes = swap;
        swap = frontier_configs;
        frontier_configs = next_configs;
        next_configs = swap;
    }
    result = PyLong_FromSsize_t(output.found);

done:
    stepper_close(&stepper);
    Py_buffer *views[] = {&start_nodes_view, &start_configs_view, &out_ids, &out_ends, &marks_view, &out_words,
                          &exit_starts_view, &excepted_view};
    for (size_t i = 0; i < sizeof(views) / sizeof(views[0]); i++) {
        if (views[i]->obj != NULL) {
            PyBuffer_Release(views[i]);
        }
    }
    scratch = (WalkScratch){frontier_nodes, frontier_configs, next_nodes, next_configs, loop_cache};
    walk_scratch_give(&scratch, scratch_kept);
    return result;
}

/* ``config`` stepped through the ``length`` (0..4) bytes of ``tail``: DEAD once dead, or
 * UNKNOWN with an exception set (``function`` names the caller in the message). */
static int32_t run_tail(Stepper *stepper, int32_t config, const uint8_t *tail, int32_t length, const char *function) {
    if (length < 0 || length > 4) {
        PyErr_Format(PyExc_ValueError, "%s: a tail longer than 4 bytes", function);
        return UNKNOWN;
    }
    for (int32_t position = 0; position < length && config != DEAD; position++) {
        if (config < 0 || config >= stepper->num_rows) {
            PyErr_Format(PyExc_ValueError, "%s: configuration out of range", function);
            return UNKNOWN;
        }
        const uint8_t value = tail[position];
        int32_t after = ((const int32_t *)stepper->table.buf)[(Py_ssize_t)config * ROW_WIDTH + value];
        if (after == UNKNOWN && (after = stepper_entry(stepper, config, value, 1)) == UNKNOWN) {
            return UNKNOWN;
        }
        config = after;
    }
    return config;
}

/* Where the exit with ``tail`` (``length`` bytes) leads from ``starts[which]``: DEAD once
 * dead, UNKNOWN with an exception set when ``which`` is past the ``num_starts`` starts or
 * the tail fails (``function`` names the caller). */
static int32_t exit_after(Stepper *stepper, const int32_t *starts, Py_ssize_t num_starts, Py_ssize_t which,
                          const uint8_t *tail, int32_t length, const char *function) {
    if (which < 0 || which >= num_starts) {
        PyErr_Format(PyExc_ValueError, "%s: an exit's start index out of range", function);
        return UNKNOWN;
    }
    return run_tail(stepper, starts[which], tail, length, function);
}

PyDoc_STRVAR(run_tails_doc,
"run_tails(automaton, starts, tails, lengths, out)\n"
"\n"
"The configuration after each short byte string: ``out[i]`` is ``starts[i]`` stepped\n"
"through the first ``lengths[i]`` bytes of row ``i`` of ``tails`` (uint8, 4 per row),\n"
"-1 once dead, with the same table reads and ``automaton.step`` calls as ``walk``.\n"
"``starts``, ``lengths`` and the writable ``out`` are int32.");

static PyObject *run_tails(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *automaton, *starts_obj, *tails_obj, *lengths_obj;
    Py_buffer out = {0};
    if (!PyArg_ParseTuple(args, "OOOOw*:run_tails", &automaton, &starts_obj, &tails_obj, &lengths_obj, &out)) {
        return NULL;
    }
    Stepper stepper = {0};
    Py_buffer starts_view = {0}, tails_view = {0}, lengths_view = {0};
    PyObject *result = NULL;
    if (get_int32_buffer(starts_obj, &starts_view, "starts") < 0 ||
        PyObject_GetBuffer(tails_obj, &tails_view, PyBUF_SIMPLE) < 0 ||
        get_int32_buffer(lengths_obj, &lengths_view, "lengths") < 0 || stepper_open(&stepper, automaton) < 0) {
        goto done;
    }
    const Py_ssize_t count = starts_view.len / (Py_ssize_t)sizeof(int32_t);
    if (lengths_view.len != starts_view.len || out.len < starts_view.len || tails_view.len != count * 4) {
        PyErr_SetString(PyExc_ValueError, "run_tails: arrays of inconsistent lengths");
        goto done;
    }
    const int32_t *starts = (const int32_t *)starts_view.buf, *lengths = (const int32_t *)lengths_view.buf;
    const uint8_t *tails = (const uint8_t *)tails_view.buf;
    int32_t *ends = (int32_t *)out.buf;
    for (Py_ssize_t i = 0; i < count; i++) {
        if ((ends[i] = run_tail(&stepper, starts[i], tails + i * 4, lengths[i], "run_tails")) == UNKNOWN) {
            goto done;
        }
    }
    Py_INCREF(Py_None);
    result = Py_None;

done:
    stepper_close(&stepper);
    Py_buffer *views[] = {&starts_view, &tails_view, &lengths_view, &out};
    for (size_t i = 0; i < sizeof(views) / sizeof(views[0]); i++) {
        if (views[i]->obj != NULL) {
            PyBuffer_Release(views[i]);
        }
    }
    return result;
}

PyDoc_STRVAR(live_exits_doc,
"live_exits(automaton, starts, start_of, tails, lengths, nodes, first_bytes, skip, out_nodes, out_configs)\n"
"\n"
"The exits of a token group that stay live: exit ``i`` starts from ``starts[start_of[i]]``\n"
"(``starts[0]`` when ``start_of`` is None) and steps through its tail as ``run_tails``\n"
"does; unless its first byte (``first_bytes[i]``, uint8) is flagged in ``skip`` (256\n"
"uint8 flags, or None), a live one writes ``nodes[i]`` and its configuration to the\n"
"writable ``out_nodes`` and ``out_configs`` (int32, one entry per exit). Returns how many.\n"
"A skipped exit's tail is not run.");

static PyObject *live_exits(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *automaton, *starts_obj, *start_of_obj, *tails_obj, *lengths_obj, *nodes_obj, *first_obj, *skip_obj;
    Py_buffer out_nodes = {0}, out_configs = {0};
    if (!PyArg_ParseTuple(args, "OOOOOOOOw*w*:live_exits", &automaton, &starts_obj, &start_of_obj, &tails_obj,
                          &lengths_obj, &nodes_obj, &first_obj, &skip_obj, &out_nodes, &out_configs)) {
        return NULL;
    }
    Stepper stepper = {0};
    Py_buffer starts_view = {0}, start_of_view = {0}, tails_view = {0}, lengths_view = {0}, nodes_view = {0};
    Py_buffer first_view = {0}, skip_view = {0};
    PyObject *result = NULL;
    if (get_int32_buffer(starts_obj, &starts_view, "starts") < 0 ||
        (start_of_obj != Py_None && get_int32_buffer(start_of_obj, &start_of_view, "start_of") < 0) ||
        PyObject_GetBuffer(tails_obj, &tails_view, PyBUF_SIMPLE) < 0 ||
        get_int32_buffer(lengths_obj, &lengths_view, "lengths") < 0 ||
        get_int32_buffer(nodes_obj, &nodes_view, "nodes") < 0 ||
        PyObject_GetBuffer(first_obj, &first_view, PyBUF_SIMPLE) < 0 ||
        (skip_obj != Py_None && PyObject_GetBuffer(skip_obj, &skip_view, PyBUF_SIMPLE) < 0) ||
        stepper_open(&stepper, automaton) < 0) {
        goto done;
    }
    const Py_ssize_t count = nodes_view.len / (Py_ssize_t)sizeof(int32_t);
    const Py_ssize_t num_starts = starts_view.len / (Py_ssize_t)sizeof(int32_t);
    if (lengths_view.len != nodes_view.len || tails_view.len != count * 4 || first_view.len != count ||
        (start_of_view.obj != NULL && start_of_view.len != nodes_view.len) ||
        (skip_view.obj != NULL && skip_view.len != 256) || out_nodes.len < nodes_view.len ||
        out_configs.len < nodes_view.len || num_starts < 1) {
        PyErr_SetString(PyExc_ValueError, "live_exits: arrays of inconsistent lengths");
        goto done;
    }
    const int32_t *starts = (const int32_t *)starts_view.buf, *lengths = (const int32_t *)lengths_view.buf;
    const int32_t *start_of = (const int32_t *)start_of_view.buf, *nodes = (const int32_t *)nodes_view.buf;
    const uint8_t *tails = (const uint8_t *)tails_view.buf, *first = (const uint8_t *)first_view.buf;
    const uint8_t *skip = (const uint8_t *)skip_view.buf;
    int32_t *live_nodes = (int32_t *)out_nodes.buf, *live_configs = (int32_t *)out_configs.buf;
    Py_ssize_t found = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        if (skip != NULL && skip[first[i]]) {
            continue;
        }
        const int32_t after = exit_after(&stepper, starts, num_starts, start_of == NULL ? 0 : start_of[i], tails + i * 4,
                                         lengths[i], "live_exits");
        if (after == UNKNOWN) {
            goto done;
        }
        if (after != DEAD) {
            live_nodes[found] = nodes[i];
            live_configs[found++] = after;
        }
    }
    result = PyLong_FromSsize_t(found);

done:
    stepper_close(&stepper);
    Py_buffer *views[] = {&starts_view, &start_of_view, &tails_view, &lengths_view, &nodes_view,
                          &first_view, &skip_view, &out_nodes, &out_configs};
    for (size_t i = 0; i < sizeof(views) / sizeof(views[0]); i++) {
        if (views[i]->obj != NULL) {
            PyBuffer_Release(views[i]);
        }
    }
    return result;
}

static const char set_bits_doc[] = (
"set_bits(ids, words)\n"
"\n"
"Set bit ``i & 31`` of ``words[i >> 5]`` for every ``i`` of ``ids`` (int32); ``words`` is a\n"
"writable uint32 array. Ids outside the words raise ValueError, with no bit set.");

static PyObject *set_bits(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *ids_obj;
    Py_buffer words = {0}, ids_view = {0};
    if (!PyArg_ParseTuple(args, "Ow*:set_bits", &ids_obj, &words)) {
        return NULL;
    }
    PyObject *result = NULL;
    if (get_int32_buffer(ids_obj, &ids_view, "ids") < 0) {
        goto done;
    }
    const int32_t *ids = (const int32_t *)ids_view.buf;
    const Py_ssize_t count = ids_view.len / (Py_ssize_t)sizeof(int32_t);
    const Py_ssize_t limit = (words.len / (Py_ssize_t)sizeof(uint32_t)) * 32;
    for (Py_ssize_t i = 0; i < count; i++) {
        if (ids[i] < 0 || ids[i] >= limit) {
            PyErr_Format(PyExc_ValueError, "set_bits: id %d outside %zd bits", (int)ids[i], limit);
            goto done;
        }
    }
    uint32_t *bits = (uint32_t *)words.buf;
    for (Py_ssize_t i = 0; i < count; i++) {
        bits[ids[i] >> 5] |= (uint32_t)1 << (ids[i] & 31);
    }
    Py_INCREF(Py_None);
    result = Py_None;

done:
    if (ids_view.obj != NULL) {
        PyBuffer_Release(&ids_view);
    }
    PyBuffer_Release(&words);
    return result;
}

static const char bit_ids_doc[] = (
"bit_ids(words, size, out)\n"
"\n"
"``set_bits`` undone: writes the ids below ``size`` whose bits are set in ``words``\n"
"(uint32, bit i of word i >> 5) to ``out`` (int32, room for every one) in increasing\n"
"order and returns how many there are.");

static PyObject *bit_ids(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer words = {0}, out = {0};
    Py_ssize_t size;
    if (!PyArg_ParseTuple(args, "y*nw*:bit_ids", &words, &size, &out)) {
        return NULL;
    }
    PyObject *result = NULL;
    const Py_ssize_t num_words = words.len / (Py_ssize_t)sizeof(uint32_t);
    const Py_ssize_t room = out.len / (Py_ssize_t)sizeof(int32_t);
    if (size < 0 || size > num_words * 32 || size > INT32_MAX) {
        PyErr_Format(PyExc_ValueError, "bit_ids: %zd ids do not fit %zd words", size, num_words);
        goto done;
    }
    const uint32_t *bits = (const uint32_t *)words.buf;
    int32_t *ids = (int32_t *)out.buf;
    Py_ssize_t found = 0;
    for (Py_ssize_t w = 0; w < num_words; w++) {
        uint32_t word = bits[w];
        while (word) {
            const Py_ssize_t id = w * 32 + __builtin_ctz(word);
            word &= word - 1;
            if (id >= size) {
                break;
            }
            if (found == room) {
                PyErr_SetString(PyExc_ValueError, "bit_ids: more ids than room in out");
                goto done;
            }
            ids[found++] = (int32_t)id;
        }
    }
    result = PyLong_FromSsize_t(found);

done:
    PyBuffer_Release(&words);
    PyBuffer_Release(&out);
    return result;
}

static const char successor_stats_doc[] = (
"successor_stats(row, groups)\n"
"\n"
"A configuration's successors by the ASCII bytes (``row``: 128 int32) read per token\n"
"group (``groups``: 128 uint8 flags per group, 1 for the group's bytes): (how many of\n"
"the successors are live, and per group a triple: the successor all its bytes lead to,\n"
"else None; the one more than half of them lead to, else None; and how many lead\n"
"elsewhere than that one, else None).");

/* The group's triple (a new reference): Boyer-Moore's vote finds the only successor that
 * can hold a majority, a second pass counts its bytes. */
static PyObject *group_successor_stats(const int32_t *successors, const uint8_t *member) {
    Py_ssize_t count = 0, votes = 0, agree = 0;
    int32_t first = 0, candidate = 0;
    int uniform = 1;
    for (int b = 0; b < 128; b++) {
        if (!member[b]) {
            continue;
        }
        const int32_t successor = successors[b];
        if (count++ == 0) {
            first = successor;
        } else if (successor != first) {
            uniform = 0;
        }
        if (votes == 0) {
            candidate = successor;
            votes = 1;
        } else {
            votes += successor == candidate ? 1 : -1;
        }
    }
    for (int b = 0; b < 128; b++) {
        agree += member[b] && successors[b] == candidate;
    }
    const int majority = count > 0 && 2 * agree > count;
    PyObject *common = count > 0 && uniform ? PyLong_FromLong(first) : Py_NewRef(Py_None);
    PyObject *most = majority ? PyLong_FromLong(candidate) : Py_NewRef(Py_None);
    PyObject *others = majority ? PyLong_FromSsize_t(count - agree) : Py_NewRef(Py_None);
    if (common == NULL || most == NULL || others == NULL) {
        Py_XDECREF(common);
        Py_XDECREF(most);
        Py_XDECREF(others);
        return NULL;
    }
    return Py_BuildValue("(NNN)", common, most, others);
}

static PyObject *successor_stats(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *row_obj, *stats = NULL, *result = NULL;
    Py_buffer row = {0}, groups = {0};
    if (!PyArg_ParseTuple(args, "Oy*:successor_stats", &row_obj, &groups)) {
        return NULL;
    }
    if (get_int32_buffer(row_obj, &row, "row") < 0) {
        goto done;
    }
    if (row.len != 128 * (Py_ssize_t)sizeof(int32_t) || groups.len % 128 != 0) {
        PyErr_SetString(PyExc_ValueError, "successor_stats: a row of 128 int32 and 128 flags per group");
        goto done;
    }
    const int32_t *successors = (const int32_t *)row.buf;
    const uint8_t *flags = (const uint8_t *)groups.buf;
    const Py_ssize_t num_groups = groups.len / 128;
    int live = 0;
    for (int b = 0; b < 128; b++) {
        live += successors[b] >= 0;
    }
    if ((stats = PyTuple_New(num_groups)) == NULL) {
        goto done;
    }
    for (Py_ssize_t g = 0; g < num_groups; g++) {
        PyObject *triple = group_successor_stats(successors, flags + g * 128);
        if (triple == NULL) {
            goto done;
        }
        PyTuple_SET_ITEM(stats, g, triple);
    }
    result = Py_BuildValue("(iO)", live, stats);

done:
    Py_XDECREF(stats);
    if (row.obj != NULL) {
        PyBuffer_Release(&row);
    }
    PyBuffer_Release(&groups);
    return result;
}

static const char product_moves_doc[] = (
"product_moves(rows, index)\n"
"\n"
"An intersection's moves from one state: ``rows`` holds each operand's row (256 int32,\n"
"negative where it dies). Writes to ``index`` (256 int16) each byte's position among the\n"
"distinct successors, -1 where some operand dies, and returns those successors, tuples of\n"
"the operands' states in increasing (lexicographic) order.");

#define PRODUCT_MAX_OPERANDS 64
#define PRODUCT_SLOTS 512

typedef struct {
    const int32_t *rows[PRODUCT_MAX_OPERANDS];
    Py_ssize_t count;
} ProductRows;

/* Compares the successors by bytes ``a`` and ``b`` operand by operand. */
static int product_compare(const ProductRows *rows, int a, int b) {
    for (Py_ssize_t i = 0; i < rows->count; i++) {
        const int32_t x = rows->rows[i][a], y = rows->rows[i][b];
        if (x != y) {
            return x < y ? -1 : 1;
        }
    }
    return 0;
}

static PyObject *product_moves(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *rows_obj;
    Py_buffer index_view = {0};
    if (!PyArg_ParseTuple(args, "Ow*:product_moves", &rows_obj, &index_view)) {
        return NULL;
    }
    PyObject *result = NULL, *rows_seq = NULL;
    Py_buffer views[PRODUCT_MAX_OPERANDS];
    Py_ssize_t opened = 0;
    ProductRows rows = {{0}, 0};
    if (index_view.len != 256 * (Py_ssize_t)sizeof(int16_t)) {
        PyErr_SetString(PyExc_ValueError, "product_moves: index is not 256 int16");
        goto done;
    }
    rows_seq = PySequence_Fast(rows_obj, "product_moves: rows is not a sequence");
    if (rows_seq == NULL) {
        goto done;
    }
    rows.count = PySequence_Fast_GET_SIZE(rows_seq);
    if (rows.count < 1 || rows.count > PRODUCT_MAX_OPERANDS) {
        PyErr_Format(PyExc_ValueError, "product_moves: 1 to %d rows, not %zd", PRODUCT_MAX_OPERANDS, rows.count);
        goto done;
    }
    for (; opened < rows.count; opened++) {
        if (get_int32_buffer(PySequence_Fast_GET_ITEM(rows_seq, opened), &views[opened], "a row") < 0) {
            goto done;
        }
        if (views[opened].len != ROW_BYTES) {
            PyBuffer_Release(&views[opened]);
            PyErr_SetString(PyExc_ValueError, "product_moves: a row is not 256 int32");
            goto done;
        }
        rows.rows[opened] = (const int32_t *)views[opened].buf;
    }
    /* Each live byte finds the first byte with its successor through a hash of the
     * successor (at most 256 distinct ones in 512 slots). */
    int16_t slots[PRODUCT_SLOTS];
    memset(slots, -1, sizeof(slots));
    int first_of[256];   /* the first byte with the same successor, -1 where one dies */
    int distinct[256];   /* those first bytes, in byte order */
    int num_distinct = 0;
    for (int b = 0; b < 256; b++) {
        uint64_t h = 0x9E3779B97F4A7C15ull;
        int alive = 1;
        for (Py_ssize_t i = 0; i < rows.count; i++) {
            const int32_t state = rows.rows[i][b];
            if (state < 0) {
                alive = 0;
                break;
            }
            h = (h ^ (uint64_t)(uint32_t)state) * 0xBF58476D1CE4E5B9ull;
            h ^= h >> 29;
        }
        if (!alive) {
            first_of[b] = -1;
            continue;
        }
        size_t j = (size_t)h & (PRODUCT_SLOTS - 1);
        while (slots[j] >= 0 && product_compare(&rows, slots[j], b) != 0) {
            j = (j + 1) & (PRODUCT_SLOTS - 1);
        }
        if (slots[j] < 0) {
            slots[j] = (int16_t)b;
            distinct[num_distinct++] = b;
        }
        first_of[b] = slots[j];
    }
    /* Insertion sort: a row has few distinct successors. */
    for (int i = 1; i < num_distinct; i++) {
        const int moving = distinct[i];
        int j = i - 1;
        while (j >= 0 && product_compare(&rows, distinct[j], moving) > 0) {
            distinct[j + 1] = distinct[j];
            j--;
        }
        distinct[j + 1] = moving;
    }
    int position_of[256];
    result = PyList_New(num_distinct);
    if (result == NULL) {
        goto done;
    }
    for (int d = 0; d < num_distinct; d++) {
        position_of[distinct[d]] = d;
        PyObject *states = PyTuple_New(rows.count);
        if (states == NULL) {
            Py_CLEAR(result);
            goto done;
        }
        for (Py_ssize_t i = 0; i < rows.count; i++) {
            PyObject *state = PyLong_FromLong(rows.rows[i][distinct[d]]);
            if (state == NULL) {
                Py_DECREF(states);
                Py_CLEAR(result);
                goto done;
            }
            PyTuple_SET_ITEM(states, i, state);
        }
        PyList_SET_ITEM(result, d, states);
    }
    int16_t *index = (int16_t *)index_view.buf;
    for (int b = 0; b < 256; b++) {
        index[b] = (int16_t)(first_of[b] < 0 ? -1 : position_of[first_of[b]]);
    }

done:
    for (Py_ssize_t i = 0; i < opened; i++) {
        PyBuffer_Release(&views[i]);
    }
    Py_XDECREF(rows_seq);
    PyBuffer_Release(&index_view);
    return result;
}

static PyMethodDef native_methods[] = {
    {"trie_tables", trie_tables, METH_VARARGS, trie_tables_doc},
    {"walk", (PyCFunction)(void (*)(void))walk, METH_VARARGS | METH_KEYWORDS, walk_doc},
    {"run_tails", run_tails, METH_VARARGS, run_tails_doc},
    {"live_exits", live_exits, METH_VARARGS, live_exits_doc},
    {"group_exits", group_exits, METH_VARARGS, group_exits_doc},
    {"set_bits", set_bits, METH_VARARGS, set_bits_doc},
    {"bit_ids", bit_ids, METH_VARARGS, bit_ids_doc},
    {"successor_stats", successor_stats, METH_VARARGS, successor_stats_doc},
    {"product_moves", product_moves, METH_VARARGS, product_moves_doc},
    {"nfa_tables", nfa_tables, METH_VARARGS, nfa_tables_doc},
    {"close", close_items, METH_VARARGS, close_doc},
    {"set_search_tails", set_search_tails, METH_VARARGS, set_search_tails_doc},
    {"plain_scans", plain_scans, METH_VARARGS, plain_scans_doc},
    {"frozen", frozen, METH_O, frozen_doc},
    {"intern_info", intern_info, METH_VARARGS, intern_info_doc},
    {"settle_context", settle_context_py, METH_VARARGS, settle_context_doc},
    {"bind", bind_containers, METH_VARARGS, bind_doc},
    {"successor", part_successor, METH_VARARGS, successor_doc},
    {"utf8_agrees", utf8_agrees, METH_VARARGS, utf8_agrees_doc},
    {"utf8_agrees_config", utf8_agrees_config, METH_VARARGS, utf8_agrees_config_doc},
    {"entry", entry, METH_VARARGS, entry_doc},
    {"fill_row", fill_row, METH_VARARGS, fill_row_doc},
    {"count_shifted", count_shifted, METH_VARARGS, count_shifted_doc},
    {"items", configuration_items, METH_VARARGS, items_doc},
    {"intern", intern_configuration, METH_VARARGS, intern_doc},
    {"shifted_counts", shifted_counts, METH_VARARGS, shifted_counts_doc},
    {"successors", successors, METH_VARARGS, successors_doc},
    {"partition", partition, METH_O, partition_doc},
    {"bound_tables", bound_tables, METH_VARARGS, bound_tables_doc},
    {"completion_bounds", completion_bounds, METH_VARARGS, completion_bounds_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef native_module = {
    PyModuleDef_HEAD_INIT, "_native", "Native trie walk and parse-state building for surecall's engine.", -1, native_methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__native(void) { return PyModule_Create(&native_module); }
