/* ROUGE-N and ROUGE-L of a pair of texts in C, for metrics/text.py: rouge-score's
 * tokenizer (the text lower-cased, every run of [a-z0-9] one token, tokens of more
 * than three characters stemmed), its n-gram overlaps and its longest common
 * subsequence, with its F-measures.
 *
 * Why by hand: no library keeps a text's tokens and stems between ROUGE types and
 * between rows. rouge-score (pure Python) and rouge-score-rs (Rust; evalbeam runs it
 * where this module was not built, and for rougeLsum of texts with line breaks) score
 * every type asked for in one call, but each call tokenizes both texts and stems every
 * token again, and that is most of the call (docs/performance.md, the fourth
 * step). rouge-score-rs's score_documents takes tokens already stemmed, but they cross
 * as Python strings, a list of them per text per row, made and converted each call.
 * Here a token is never a Python string: each distinct token is stemmed once, by the
 * stemmer the caller passes (rouge-score-rs's Porter stemmer, NLTK's, which
 * rouge-score uses), and kept in a bounded table of the process; rouge1, rouge2,
 * rougeL and rougeLsum of one pair share those tokens. tests/metrics/test_text.py
 * checks every score against rouge-score itself on many generated texts, and this
 * module's memory under valgrind.
 *
 * scores(target, prediction, orders, stem) -> tuple[float, ...]
 *     for each n of `orders` (a tuple of ints), the F-measure of rouge-score's
 *     rouge<n> (1 <= n <= 9), or of its rougeL for n = 0, of prediction against
 *     target; `stem` is None (no stemmer) or a callable taking a token of more than
 *     three characters (str) and returning its stem (str), or None where
 *     rouge-score's tokenizer drops it.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* The tables kept between calls hold at most this many distinct tokens and bytes of
 * them; past that they are emptied before the next call. One call's own tokens are held
 * whatever their number, and given back after it. */
#define KEPT_TOKENS (1 << 15)
#define KEPT_BYTES (1 << 20)
/* Bit-parallel LCS needs a bit set per distinct token of the shorter text; past this
 * many 64-bit words of them it runs the plain dynamic programme in two rows instead. */
#define MAX_BITSET_WORDS (1 << 16)

/* Strings of [a-z0-9] -> an int32, by open addressing; the strings' bytes in one arena. */
typedef struct {
    uint64_t hash;
    uint32_t offset;
    uint32_t length;
    int32_t value;
    int32_t used;
} Slot;

typedef struct {
    Slot *slots;
    Py_ssize_t size; /* a power of two, or 0 before first use */
    Py_ssize_t count;
    char *arena;
    size_t arena_used, arena_size;
} Table;

static void table_free(Table *t)
{
    PyMem_Free(t->slots);
    PyMem_Free(t->arena);
    memset(t, 0, sizeof(*t));
}

static uint64_t bytes_hash(const char *s, Py_ssize_t n)
{
    uint64_t h = 0xCBF29CE484222325ull; /* FNV-1a, then a final mix */
    for (Py_ssize_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 0x100000001B3ull;
    }
    h ^= h >> 33;
    h *= 0xFF51AFD7ED558CCDull;
    h ^= h >> 33;
    return h;
}

static Slot *table_find(const Table *t, const char *s, Py_ssize_t n, uint64_t hash)
{
    Py_ssize_t mask = t->size - 1;
    for (Py_ssize_t j = (Py_ssize_t)(hash & (uint64_t)mask);; j = (j + 1) & mask) {
        Slot *slot = &t->slots[j];
        if (!slot->used)
            return slot;
        if (slot->hash == hash && slot->length == (uint32_t)n && memcmp(t->arena + slot->offset, s, (size_t)n) == 0)
            return slot;
    }
}

static int table_grow(Table *t)
{
    Py_ssize_t size = t->size ? 2 * t->size : 1024;
    Slot *slots = PyMem_Calloc((size_t)size, sizeof(Slot));
    if (slots == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < t->size; i++) {
        Slot *old = &t->slots[i];
        if (!old->used)
            continue;
        for (Py_ssize_t j = (Py_ssize_t)(old->hash & (uint64_t)(size - 1));; j = (j + 1) & (size - 1)) {
            if (!slots[j].used) {
                slots[j] = *old;
                break;
            }
        }
    }
    PyMem_Free(t->slots);
    t->slots = slots;
    t->size = size;
    return 0;
}

/* Adds s (not in t: slot is where table_find stopped) with its value; -1 on MemoryError. */
static int table_add(Table *t, Slot *slot, const char *s, Py_ssize_t n, uint64_t hash, int32_t value)
{
    if (t->arena_used + (size_t)n > UINT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "rouge: tokens too long");
        return -1;
    }
    if (t->arena_used + (size_t)n > t->arena_size) {
        size_t size = t->arena_size ? 2 * t->arena_size : 4096;
        while (size < t->arena_used + (size_t)n)
            size *= 2;
        char *arena = PyMem_Realloc(t->arena, size);
        if (arena == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        t->arena = arena;
        t->arena_size = size;
    }
    memcpy(t->arena + t->arena_used, s, (size_t)n);
    slot->hash = hash;
    slot->offset = (uint32_t)t->arena_used;
    slot->length = (uint32_t)n;
    slot->value = value;
    slot->used = 1;
    t->arena_used += (size_t)n;
    t->count++;
    if (2 * t->count > t->size)
        return table_grow(t);
    return 0;
}

/* What tokens have been seen: tokens -> their final token's id (stemming only: -1 for
 * a token the tokenizer drops), finals -> ids 0, 1, ... in order; and, per call, each
 * final id's local id (mark[id] == call: local[id] is set). */
typedef struct {
    Table tokens, finals;
    PyObject *stem; /* the stemmer `tokens` was filled by (a strong reference), or NULL */
    uint32_t *mark;
    int32_t *local;
    Py_ssize_t marked; /* the length of mark and local */
    uint32_t call;
    int busy;
} Vocabulary;

/* One per stemming setting, kept between calls; a call that finds its one busy (a call
 * from the stemmer, or from another thread while the stemmer runs) uses one of its own. */
static Vocabulary kept[2];

static void vocabulary_free(Vocabulary *v)
{
    table_free(&v->tokens);
    table_free(&v->finals);
    Py_CLEAR(v->stem);
    PyMem_Free(v->mark);
    PyMem_Free(v->local);
    v->mark = NULL;
    v->local = NULL;
    v->marked = 0;
}

static int final_id(Vocabulary *v, const char *s, Py_ssize_t n)
{
    Table *t = &v->finals;
    if (t->size == 0 && table_grow(t) < 0)
        return -2;
    uint64_t hash = bytes_hash(s, n);
    Slot *slot = table_find(t, s, n, hash);
    if (slot->used)
        return slot->value;
    if (t->count >= INT32_MAX - 1) {
        PyErr_SetString(PyExc_OverflowError, "rouge: too many distinct tokens");
        return -2;
    }
    int32_t id = (int32_t)t->count;
    if (table_add(t, slot, s, n, hash, id) < 0)
        return -2;
    return id;
}

static int is_token_byte(Py_UCS4 c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }

/* The final id of a token of more than three characters with a stemmer: its stem's. -1:
 * rouge-score's tokenizer drops it (the stem is no [a-z0-9]+); -2: an error is set. */
static int stemmed_id(Vocabulary *v, PyObject *stem, const char *s, Py_ssize_t n)
{
    Table *t = &v->tokens;
    if (t->size == 0 && table_grow(t) < 0)
        return -2;
    uint64_t hash = bytes_hash(s, n);
    Slot *slot = table_find(t, s, n, hash);
    if (slot->used)
        return slot->value;
    PyObject *result = PyObject_CallFunction(stem, "s#", s, n);
    if (result == NULL)
        return -2;
    int id = -1;
    if (result != Py_None) {
        if (!PyUnicode_Check(result)) {
            PyErr_SetString(PyExc_TypeError, "rouge: the stemmer must return str or None");
            Py_DECREF(result);
            return -2;
        }
        Py_ssize_t m = PyUnicode_GET_LENGTH(result);
        int valid = m > 0 && PyUnicode_IS_ASCII(result);
        const char *stemmed = valid ? (const char *)PyUnicode_1BYTE_DATA(result) : NULL;
        for (Py_ssize_t i = 0; valid && i < m; i++)
            valid = is_token_byte((unsigned char)stemmed[i]);
        if (valid)
            id = final_id(v, stemmed, m);
    }
    Py_DECREF(result);
    if (id == -2)
        return -2;
    /* the stemmer ran Python code, but this vocabulary is busy: no other call changed t */
    slot = table_find(t, s, n, hash);
    if (table_add(t, slot, s, n, hash, id) < 0)
        return -2;
    return id;
}

typedef struct {
    int32_t *ids;
    Py_ssize_t count, size;
} Ids;

static int ids_push(Ids *ids, int32_t id)
{
    if (ids->count == ids->size) {
        Py_ssize_t size = ids->size ? 2 * ids->size : 64;
        int32_t *grown = PyMem_Realloc(ids->ids, (size_t)size * sizeof(int32_t));
        if (grown == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        ids->ids = grown;
        ids->size = size;
    }
    ids->ids[ids->count++] = id;
    return 0;
}

/* rouge-score's tokens of a text, as final ids: text.lower(), each run of [a-z0-9] a
 * token (everything else, after lower(), is a separator: its NON_ALPHANUM_RE and
 * SPACES_RE), stemmed when longer than three characters, dropped when its stem is no
 * [a-z0-9]+ (its VALID_TOKEN_RE). An ASCII text is lower-cased here, byte by byte. */
static int text_ids(Vocabulary *v, PyObject *text, PyObject *stem, Ids *out)
{
    PyObject *lowered = NULL;
#if PY_VERSION_HEX < 0x030C0000
    if (PyUnicode_READY(text) < 0)
        return -1;
#endif
    int ascii = PyUnicode_IS_ASCII(text);
    if (!ascii) {
        lowered = PyObject_CallMethod((PyObject *)&PyUnicode_Type, "lower", "O", text);
        if (lowered == NULL)
            return -1;
        text = lowered;
    }
    int kind = PyUnicode_KIND(text);
    const void *data = PyUnicode_DATA(text);
    Py_ssize_t n = PyUnicode_GET_LENGTH(text);
    char small[64];
    char *buffer = small;
    Py_ssize_t room = sizeof(small), length = 0;
    int status = 0;
    for (Py_ssize_t i = 0; i <= n; i++) {
        Py_UCS4 c = i < n ? PyUnicode_READ(kind, data, i) : ' ';
        if (ascii && c >= 'A' && c <= 'Z')
            c += 'a' - 'A';
        if (is_token_byte(c)) {
            if (length == room) {
                room *= 2;
                char *grown = buffer == small ? PyMem_Malloc((size_t)room) : PyMem_Realloc(buffer, (size_t)room);
                if (grown == NULL) {
                    PyErr_NoMemory();
                    status = -1;
                    break;
                }
                if (buffer == small)
                    memcpy(grown, small, sizeof(small));
                buffer = grown;
            }
            buffer[length++] = (char)c;
            continue;
        }
        if (length == 0)
            continue;
        int id = stem != NULL && length > 3 ? stemmed_id(v, stem, buffer, length) : final_id(v, buffer, length);
        length = 0;
        if (id == -2 || (id >= 0 && ids_push(out, id) < 0)) {
            status = -1;
            break;
        }
    }
    if (buffer != small)
        PyMem_Free(buffer);
    Py_XDECREF(lowered);
    return status;
}

/* Final ids made local ids 0 .. distinct - 1 (those of `first` first), in place. */
static int localize(Vocabulary *v, Ids *first, Ids *second, int32_t *distinct_first, int32_t *distinct)
{
    Py_ssize_t needed = v->finals.count;
    if (needed > v->marked) {
        uint32_t *mark = PyMem_Realloc(v->mark, (size_t)needed * sizeof(uint32_t));
        if (mark != NULL)
            v->mark = mark;
        int32_t *local = mark == NULL ? NULL : PyMem_Realloc(v->local, (size_t)needed * sizeof(int32_t));
        if (local == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        v->local = local;
        memset(v->mark + v->marked, 0, (size_t)(needed - v->marked) * sizeof(uint32_t));
        v->marked = needed;
    }
    if (++v->call == 0) {
        memset(v->mark, 0, (size_t)v->marked * sizeof(uint32_t));
        v->call = 1;
    }
    int32_t next = 0;
    Ids *texts[2] = {first, second};
    for (int k = 0; k < 2; k++) {
        for (Py_ssize_t i = 0; i < texts[k]->count; i++) {
            int32_t id = texts[k]->ids[i];
            if (v->mark[id] != v->call) {
                v->mark[id] = v->call;
                v->local[id] = next++;
            }
            texts[k]->ids[i] = v->local[id];
        }
        if (k == 0)
            *distinct_first = next;
    }
    *distinct = next;
    return 0;
}

static Py_ssize_t slots_for(Py_ssize_t count)
{
    Py_ssize_t size = 16;
    while (size < 2 * count)
        size <<= 1;
    return size;
}

typedef struct {
    int32_t start;
    int32_t in_target;
    int32_t in_prediction;
} GramSlot;

static uint64_t gram_hash(const int32_t *ids, int n)
{
    uint64_t h = 0x9E3779B97F4A7C15ull;
    for (int k = 0; k < n; k++) {
        h ^= (uint32_t)ids[k];
        h *= 0xBF58476D1CE4E5B9ull;
        h ^= h >> 29;
    }
    return h;
}

static GramSlot *gram_find(GramSlot *slots, Py_ssize_t mask, const int32_t *target, const int32_t *gram, int n,
                           int insert)
{
    for (Py_ssize_t j = (Py_ssize_t)(gram_hash(gram, n) & (uint64_t)mask);; j = (j + 1) & mask) {
        GramSlot *s = &slots[j];
        if (s->start < 0) {
            if (!insert)
                return NULL;
            s->start = (int32_t)(gram - target);
            s->in_target = 0;
            s->in_prediction = 0;
            return s;
        }
        if (memcmp(target + s->start, gram, (size_t)n * sizeof(int32_t)) == 0)
            return s;
    }
}

/* rouge-score's _score_ngrams' intersection: over the distinct n-grams of the target,
 * the sum of min(count in target, count in prediction). -1 with MemoryError set. */
static long long ngram_overlap(const int32_t *t, Py_ssize_t nt, const int32_t *p, Py_ssize_t np, int n,
                               int32_t distinct)
{
    long long overlap = 0;
    if (nt < n || np < n)
        return 0;
    if (n == 1) {
        int32_t *counts = PyMem_Calloc(2 * (size_t)distinct, sizeof(int32_t));
        if (counts == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        for (Py_ssize_t i = 0; i < nt; i++)
            counts[t[i]]++;
        for (Py_ssize_t i = 0; i < np; i++)
            if (counts[distinct + p[i]]++ < counts[p[i]])
                overlap++;
        PyMem_Free(counts);
        return overlap;
    }
    Py_ssize_t size = slots_for(nt - n + 1);
    GramSlot *slots = PyMem_Malloc((size_t)size * sizeof(GramSlot));
    if (slots == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t j = 0; j < size; j++)
        slots[j].start = -1;
    for (Py_ssize_t i = 0; i + n <= nt; i++)
        gram_find(slots, size - 1, t, t + i, n, 1)->in_target++;
    for (Py_ssize_t i = 0; i + n <= np; i++) {
        GramSlot *s = gram_find(slots, size - 1, t, p + i, n, 0);
        if (s != NULL && s->in_prediction++ < s->in_target)
            overlap++;
    }
    PyMem_Free(slots);
    return overlap;
}

/* The length of a longest common subsequence of a (whose distinct ids are 0 .. na_distinct
 * - 1) and b: Hyyro's bit-parallel algorithm (V = all ones; per token of b, U = V & its
 * positions in a, V = (V + U) | (V - U); the zeros of V count), or, for a large a, the
 * dynamic programme of rouge-score's _lcs_table in two rows. -1 with MemoryError set. */
static Py_ssize_t lcs_length(const int32_t *a, Py_ssize_t na, int32_t na_distinct, const int32_t *b, Py_ssize_t nb)
{
    Py_ssize_t words = (na + 63) / 64;
    if ((double)words * na_distinct <= MAX_BITSET_WORDS) {
        uint64_t *positions = PyMem_Calloc((size_t)(words * na_distinct + words), sizeof(uint64_t));
        if (positions == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        uint64_t *v = positions + words * na_distinct;
        for (Py_ssize_t i = 0; i < na; i++)
            positions[a[i] * words + i / 64] |= 1ull << (i % 64);
        for (Py_ssize_t w = 0; w < words; w++)
            v[w] = ~0ull;
        for (Py_ssize_t j = 0; j < nb; j++) {
            if (b[j] >= na_distinct)
                continue; /* no token of a: U is 0, V stays */
            const uint64_t *m = positions + (Py_ssize_t)b[j] * words;
            uint64_t carry = 0;
            for (Py_ssize_t w = 0; w < words; w++) {
                uint64_t x = v[w], u = x & m[w];
                uint64_t sum = x + u;
                uint64_t out = sum < x;
                sum += carry;
                out |= sum < carry;
                carry = out;
                v[w] = sum | (x - u);
            }
        }
        Py_ssize_t zeros = 0;
        for (Py_ssize_t w = 0; w < words; w++) {
            uint64_t valid = w == words - 1 && na % 64 ? (1ull << (na % 64)) - 1 : ~0ull;
            zeros += __builtin_popcountll(~v[w] & valid);
        }
        PyMem_Free(positions);
        return zeros;
    }
    Py_ssize_t *row = PyMem_Calloc(2 * (size_t)(nb + 1), sizeof(Py_ssize_t));
    if (row == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    Py_ssize_t *previous = row, *current = row + nb + 1;
    for (Py_ssize_t i = 0; i < na; i++) {
        for (Py_ssize_t j = 1; j <= nb; j++)
            current[j] = a[i] == b[j - 1] ? previous[j - 1] + 1
                         : previous[j] > current[j - 1] ? previous[j] : current[j - 1];
        Py_ssize_t *swap = previous;
        previous = current;
        current = swap;
    }
    Py_ssize_t length = previous[nb];
    PyMem_Free(row);
    return length;
}

/* rouge-score's scoring.fmeasure, the same operations in the same order. */
static double fmeasure(double precision, double recall)
{
    if (precision + recall > 0)
        return 2 * precision * recall / (precision + recall);
    return 0.0;
}

static double max1(Py_ssize_t n) { return (double)(n > 1 ? n : 1); }

static PyObject *scores(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *target, *prediction, *orders, *stem;
    if (!PyArg_ParseTuple(args, "UUO!O:scores", &target, &prediction, &PyTuple_Type, &orders, &stem))
        return NULL;
    Py_ssize_t count = PyTuple_GET_SIZE(orders);
    int order[16];
    if (count > 16) {
        PyErr_SetString(PyExc_ValueError, "scores: at most 16 orders");
        return NULL;
    }
    for (Py_ssize_t k = 0; k < count; k++) {
        long n = PyLong_AsLong(PyTuple_GET_ITEM(orders, k));
        if (n == -1 && PyErr_Occurred())
            return NULL;
        if (n < 0 || n > 9) {
            PyErr_SetString(PyExc_ValueError, "scores: an order is 0 (rougeL) or 1 to 9");
            return NULL;
        }
        order[k] = (int)n;
    }
    if (stem == Py_None)
        stem = NULL;
    else if (!PyCallable_Check(stem)) {
        PyErr_SetString(PyExc_TypeError, "scores: stem must be None or callable");
        return NULL;
    }

    Vocabulary own = {0};
    Vocabulary *v = &kept[stem != NULL];
    if (v->busy)
        v = &own;
    v->busy = 1;
    if (v->stem != stem) /* filled by another stemmer (or none yet): start again */
        vocabulary_free(v);
    if (stem != NULL && v->stem == NULL) {
        Py_INCREF(stem);
        v->stem = stem;
    }
    PyObject *result = NULL;
    Ids t = {0}, p = {0};
    if (text_ids(v, target, stem, &t) < 0 || text_ids(v, prediction, stem, &p) < 0)
        goto done;
    /* local ids: the shorter text's first, for the LCS's bit sets */
    int target_first = t.count <= p.count;
    int32_t distinct_first, distinct;
    if (localize(v, target_first ? &t : &p, target_first ? &p : &t, &distinct_first, &distinct) < 0)
        goto done;
    result = PyTuple_New(count);
    if (result == NULL)
        goto done;
    for (Py_ssize_t k = 0; k < count; k++) {
        int n = order[k];
        double f;
        if (n == 0) {
            if (t.count == 0 || p.count == 0) {
                f = 0.0;
            } else {
                Py_ssize_t lcs = target_first ? lcs_length(t.ids, t.count, distinct_first, p.ids, p.count)
                                              : lcs_length(p.ids, p.count, distinct_first, t.ids, t.count);
                if (lcs < 0)
                    goto fail;
                f = fmeasure((double)lcs / (double)p.count, (double)lcs / (double)t.count);
            }
        } else {
            long long overlap = ngram_overlap(t.ids, t.count, p.ids, p.count, n, distinct);
            if (overlap < 0)
                goto fail;
            Py_ssize_t in_target = t.count >= n ? t.count - n + 1 : 0;
            Py_ssize_t in_prediction = p.count >= n ? p.count - n + 1 : 0;
            f = fmeasure((double)overlap / max1(in_prediction), (double)overlap / max1(in_target));
        }
        PyObject *value = PyFloat_FromDouble(f);
        if (value == NULL)
            goto fail;
        PyTuple_SET_ITEM(result, k, value);
    }
    goto done;
fail:
    Py_CLEAR(result);
done:
    PyMem_Free(t.ids);
    PyMem_Free(p.ids);
    if (v == &own) {
        vocabulary_free(&own);
    } else {
        if (v->tokens.count > KEPT_TOKENS || v->finals.count > KEPT_TOKENS ||
            v->tokens.arena_used + v->finals.arena_used > KEPT_BYTES)
            vocabulary_free(v); /* past the bound (one call's many tokens, or many calls'): start again */
        v->busy = 0;
    }
    return result;
}

static PyObject *kept_sizes(PyObject *self, PyObject *args)
{
    (void)self;
    (void)args;
    return Py_BuildValue("((nnn)(nnn))", kept[0].tokens.count, kept[0].finals.count,
                         (Py_ssize_t)(kept[0].tokens.arena_used + kept[0].finals.arena_used), kept[1].tokens.count,
                         kept[1].finals.count, (Py_ssize_t)(kept[1].tokens.arena_used + kept[1].finals.arena_used));
}

static PyMethodDef methods[] = {
    {"scores", scores, METH_VARARGS, "rouge-score's F-measures of rouge<n> (n = 1..9) and rougeL (n = 0) for a pair."},
    {"kept_sizes", kept_sizes, METH_NOARGS,
     "(tokens, final tokens, bytes) kept between calls, without and with a stemmer."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_rouge", NULL, -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__rouge(void) { return PyModule_Create(&module); }
