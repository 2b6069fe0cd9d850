/* Functions of the _native module defined outside _native.c. */
#ifndef SURECALL_NATIVE_H
#define SURECALL_NATIVE_H

#include <Python.h>

/* Transition table entries: no successor, and not computed yet (automaton.DEAD, _UNKNOWN). */
#define DEAD (-1)
#define UNKNOWN (-2)

PyObject *nfa_tables(PyObject *self, PyObject *args);
PyObject *close_items(PyObject *self, PyObject *args);
PyObject *set_search_tails(PyObject *self, PyObject *args);
PyObject *plain_scans(PyObject *self, PyObject *args);
PyObject *frozen(PyObject *self, PyObject *iterable);
PyObject *intern_info(PyObject *self, PyObject *args);
PyObject *settle_context_py(PyObject *self, PyObject *args);
PyObject *bind_containers(PyObject *self, PyObject *args);
PyObject *part_successor(PyObject *self, PyObject *args);
PyObject *utf8_agrees(PyObject *self, PyObject *args);
PyObject *utf8_agrees_config(PyObject *self, PyObject *args);
PyObject *entry(PyObject *self, PyObject *args);
PyObject *fill_row(PyObject *self, PyObject *args);
PyObject *count_shifted(PyObject *self, PyObject *args);
PyObject *configuration_items(PyObject *self, PyObject *args);
PyObject *intern_configuration(PyObject *self, PyObject *args);
PyObject *shifted_counts(PyObject *self, PyObject *args);
PyObject *successors(PyObject *self, PyObject *args);
PyObject *partition(PyObject *self, PyObject *masks);
PyObject *bound_tables(PyObject *self, PyObject *args);
PyObject *completion_bounds(PyObject *self, PyObject *args);

/* ``entry`` for the trie walks: the successor of ``config`` by ``value`` computed natively,
 * or NATIVE_ENTRY_ASK_PYTHON (possibly with an exception set) when ``automaton.step`` must
 * compute it: not native tables, no spare table row, a row Python computes, or an error.
 * ``few_bytes_read``: the walk reads few bytes of the row here (a trie node of few
 * children), so while few of its entries are known the byte's is computed alone. */
#define NATIVE_ENTRY_ASK_PYTHON (-2)
int32_t native_entry(PyObject *tables, int32_t config, int32_t value, Py_ssize_t num_rows, int few_bytes_read);
extern const char nfa_tables_doc[], close_doc[], set_search_tails_doc[], plain_scans_doc[], frozen_doc[], intern_info_doc[], settle_context_doc[], bind_doc[], successor_doc[], utf8_agrees_doc[], utf8_agrees_config_doc[], entry_doc[], fill_row_doc[], count_shifted_doc[], items_doc[], intern_doc[], shifted_counts_doc[], successors_doc[], partition_doc[],
    bound_tables_doc[], completion_bounds_doc[];

#endif
