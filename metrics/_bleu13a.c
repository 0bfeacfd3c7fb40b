/* BLEU's two hot loops in C, for metrics/sentence_bleu.py: the post-tokenizer of
 * sacrebleu's tokenizer 13a (its four regular expressions) and the clipped n-gram
 * matches of orders 1 to 4 (sacrebleu's extract_all_word_ngrams counted against a
 * reference). Written by hand because no package does either with sacrebleu's exact
 * rules (bleuscore, the one candidate, has other smoothing and other counts:
 * docs/performance.md). The rules are those of metrics/sentence_bleu.py's Python
 * path, which is checked against sacrebleu's own expressions when it is imported;
 * tests/metrics/test_text.py checks this module against both on many generated texts.
 *
 * tokens(line, punctuation) -> list[str]
 *     line with each character of `punctuation` (ASCII only) spaced out, then the
 *     three context rules applied in turn as re.sub applies them, then str.split().
 * matches(hypothesis, reference) -> (int, int, int, int)
 *     for n = 1..4, the sum over the hypothesis' n-grams of min(count in the
 *     hypothesis, count in the reference), tokens compared as strings.
 * statistics(hypothesis_line, reference_line, punctuation) -> (int,) * 6
 *     matches() of the two lines' tokens(), then the two token counts, with no
 *     token made a Python string: what sentence BLEU needs of a pair of texts.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define MAX_ORDER 4
/* A line of at most this many characters gets the room its worst case needs; a longer one's
 * room is counted first (a pass of its own, worth it only where the worst case is large). */
#define SMALL 65536

typedef struct {
    Py_ssize_t start;
    Py_ssize_t length;
} Span;

static int is_digit(Py_UCS4 c) { return c >= '0' && c <= '9'; }
static int is_point(Py_UCS4 c) { return c == '.' || c == ','; }

/* The passes below are written once, as a macro, for each of CPython's three string
 * kinds (1, 2 or 4 bytes a character): the characters they insert are ASCII, which every
 * kind holds, so a text is processed in its own kind and never widened. */
#define PASSES(T, SUFFIX)                                                                          \
/* rule 1: a space on each side of each marked character (a space itself left as it is) */       \
static Py_ssize_t spaced_##SUFFIX(const T *in, Py_ssize_t n, T *out, const uint64_t *marked)      \
{                                                                                                  \
    Py_ssize_t o = 0;                                                                              \
    for (Py_ssize_t i = 0; i < n; i++) {                                                           \
        T c = in[i];                                                                               \
        if (c < 128 && c != ' ' && (marked[c >> 6] >> (c & 63)) & 1) {                            \
            out[o++] = ' ';                                                                        \
            out[o++] = c;                                                                          \
            out[o++] = ' ';                                                                        \
        } else {                                                                                   \
            out[o++] = c;                                                                          \
        }                                                                                          \
    }                                                                                              \
    return o;                                                                                      \
}                                                                                                  \
/* ([^0-9])([\.,]) -> "\1 \2 " when points is 1 and digit 0; ([0-9])(-) -> "\1 \2 " when points  \
 * is 0 and digit 1. re.sub's leftmost non-overlapping matches: a match ends at i + 1, and the   \
 * next match's first character must not be inside it. */                                       \
static Py_ssize_t before_##SUFFIX(const T *in, Py_ssize_t n, T *out, int points, int digit)       \
{                                                                                                  \
    Py_ssize_t o = 0, done = 0;                                                                    \
    for (Py_ssize_t i = 1; i < n; i++) {                                                           \
        T c = in[i];                                                                               \
        if (points ? !is_point(c) : c != '-')                                                      \
            continue;                                                                              \
        if (i - 1 >= done && is_digit(in[i - 1]) == digit) {                                       \
            Py_ssize_t k = i - 1 - done;                                                           \
            memcpy(out + o, in + done, (size_t)k * sizeof(T));                                     \
            o += k;                                                                                \
            out[o++] = in[i - 1];                                                                  \
            out[o++] = ' ';                                                                        \
            out[o++] = c;                                                                          \
            out[o++] = ' ';                                                                        \
            done = i + 1;                                                                          \
        }                                                                                          \
    }                                                                                              \
    memcpy(out + o, in + done, (size_t)(n - done) * sizeof(T));                                    \
    return o + n - done;                                                                           \
}                                                                                                  \
/* ([\.,])([^0-9]) -> " \1 \2" */                                                                \
static Py_ssize_t after_##SUFFIX(const T *in, Py_ssize_t n, T *out)                               \
{                                                                                                  \
    Py_ssize_t o = 0, done = 0;                                                                    \
    for (Py_ssize_t i = 0; i + 1 < n; i++) {                                                       \
        if (!is_point(in[i]))                                                                      \
            continue;                                                                              \
        if (i >= done && !is_digit(in[i + 1])) {                                                   \
            Py_ssize_t k = i - done;                                                               \
            memcpy(out + o, in + done, (size_t)k * sizeof(T));                                     \
            o += k;                                                                                \
            out[o++] = ' ';                                                                        \
            out[o++] = in[i];                                                                      \
            out[o++] = ' ';                                                                        \
            out[o++] = in[i + 1];                                                                  \
            done = i + 2;                                                                          \
        }                                                                                          \
    }                                                                                              \
    memcpy(out + o, in + done, (size_t)(n - done) * sizeof(T));                                    \
    return o + n - done;                                                                           \
}                                                                                                  \
/* The four rules in their order: the text they make, in a buffer the caller frees. */           \
static T *final_##SUFFIX(const T *text, Py_ssize_t n, const uint64_t *marked, Py_ssize_t *length)  \
{                                                                                                  \
    /* the room the rules need: a marked character adds two (rule 1), a "." or "," at most two in  \
     * each of the first two context rules, a "-" at most two in the third */                     \
    Py_ssize_t room = 7 * n + 1; /* the most any character can add: six */                         \
    if (n > SMALL) { /* counted, so that a long text's room is what it needs */                    \
        room = n + 1;                                                                              \
        for (Py_ssize_t i = 0; i < n; i++) {                                                       \
            T c = text[i];                                                                         \
            if (c < 128)                                                                           \
                room += 2 * ((c != ' ' && (marked[c >> 6] >> (c & 63)) & 1) + 2 * is_point(c) + (c == '-')); \
        }                                                                                          \
    }                                                                                              \
    T *a = PyMem_Malloc((size_t)room * sizeof(T));                                                 \
    T *b = PyMem_Malloc((size_t)room * sizeof(T));                                                 \
    if (a == NULL || b == NULL) {                                                                  \
        PyMem_Free(a);                                                                             \
        PyMem_Free(b);                                                                             \
        PyErr_NoMemory();                                                                          \
        return NULL;                                                                               \
    }                                                                                              \
    Py_ssize_t m = spaced_##SUFFIX(text, n, a, marked);                                            \
    m = before_##SUFFIX(a, m, b, 1, 0);                                                            \
    m = after_##SUFFIX(b, m, a);                                                                   \
    *length = before_##SUFFIX(a, m, b, 0, 1);                                                      \
    PyMem_Free(a);                                                                                 \
    return b;                                                                                      \
}                                                                                                  \
/* str.split() of it: runs of what Python counts as whitespace (Py_UNICODE_ISSPACE, the test     \
 * str.split() makes) end the tokens. Their number; with spans, each one's start and length. */   \
static Py_ssize_t split_##SUFFIX(const T *b, Py_ssize_t m, Span *spans)                           \
{                                                                                                  \
    Py_ssize_t count = 0;                                                                          \
    for (Py_ssize_t i = 0; i < m;) {                                                               \
        while (i < m && Py_UNICODE_ISSPACE(b[i]))                                                  \
            i++;                                                                                   \
        Py_ssize_t start = i;                                                                      \
        while (i < m && !Py_UNICODE_ISSPACE(b[i]))                                                 \
            i++;                                                                                   \
        if (i > start && spans != NULL) {                                                          \
            spans[count].start = start;                                                            \
            spans[count].length = i - start;                                                       \
        }                                                                                          \
        count += i > start;                                                                        \
    }                                                                                              \
    return count;                                                                                  \
}

PASSES(Py_UCS1, 1)
PASSES(Py_UCS2, 2)
PASSES(Py_UCS4, 4)

/* A line after the four rules, cut into its tokens. */
typedef struct {
    int kind;
    void *data;
    Py_ssize_t length;
    Span *spans;
    Py_ssize_t count;
} Text;

static void text_free(Text *t)
{
    PyMem_Free(t->data);
    PyMem_Free(t->spans);
    t->data = NULL;
    t->spans = NULL;
}

static int marked_of(PyObject *punctuation, uint64_t *marked)
{
    marked[0] = marked[1] = 0;  /* the ASCII characters rule 1 spaces out */
    Py_ssize_t np = PyUnicode_GET_LENGTH(punctuation);
    for (Py_ssize_t i = 0; i < np; i++) {
        Py_UCS4 c = PyUnicode_READ_CHAR(punctuation, i);
        if (c >= 128) {
            PyErr_SetString(PyExc_ValueError, "tokens: the punctuation must be ASCII");
            return -1;
        }
        marked[c >> 6] |= (uint64_t)1 << (c & 63);
    }
    return 0;
}

static int text_of(PyObject *line, const uint64_t *marked, Text *t)
{
    Py_ssize_t n = PyUnicode_GET_LENGTH(line);
    t->data = NULL;
    t->spans = NULL;
    if ((size_t)n > (size_t)PY_SSIZE_T_MAX / (8 * sizeof(Py_UCS4)) - 1) {
        PyErr_NoMemory();
        return -1;
    }
    const void *data = PyUnicode_DATA(line);
    t->kind = PyUnicode_KIND(line);
    switch (t->kind) {
    case PyUnicode_1BYTE_KIND:
        t->data = final_1(data, n, marked, &t->length);
        break;
    case PyUnicode_2BYTE_KIND:
        t->data = final_2(data, n, marked, &t->length);
        break;
    default:
        t->data = final_4(data, n, marked, &t->length);
    }
    if (t->data == NULL)
        return -1;
    /* a long line's tokens are counted first, then cut, so that they take no more room than they
     * need; a short line gets room for the most it can have */
    if (t->length <= SMALL && (t->spans = PyMem_Malloc((size_t)(t->length / 2 + 1) * sizeof(Span))) == NULL) {
        text_free(t);
        PyErr_NoMemory();
        return -1;
    }
    for (int pass = t->length <= SMALL; pass < 2; pass++) {
        switch (t->kind) {
        case PyUnicode_1BYTE_KIND:
            t->count = split_1(t->data, t->length, t->spans);
            break;
        case PyUnicode_2BYTE_KIND:
            t->count = split_2(t->data, t->length, t->spans);
            break;
        default:
            t->count = split_4(t->data, t->length, t->spans);
        }
        if (pass == 0 && (t->spans = PyMem_Malloc((size_t)(t->count + 1) * sizeof(Span))) == NULL) {
            text_free(t);
            PyErr_NoMemory();
            return -1;
        }
    }
    return 0;
}

static PyObject *tokens(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *line, *punctuation;
    uint64_t marked[2];
    Text t;
    if (!PyArg_ParseTuple(args, "UU:tokens", &line, &punctuation) || marked_of(punctuation, marked) < 0 ||
        text_of(line, marked, &t) < 0)
        return NULL;
    PyObject *list = PyList_New(t.count);
    for (Py_ssize_t i = 0; list != NULL && i < t.count; i++) {
        const char *start = (const char *)t.data + t.spans[i].start * t.kind;
        PyObject *token = PyUnicode_FromKindAndData(t.kind, start, t.spans[i].length);
        if (token == NULL)
            Py_CLEAR(list);
        else
            PyList_SET_ITEM(list, i, token);
    }
    text_free(&t);
    return list;
}

static Py_ssize_t table_size(Py_ssize_t count)
{
    Py_ssize_t size = 16;
    while (size < 2 * count)
        size <<= 1;
    return size;
}

/* An n-gram of the reference: where it starts in the reference's ids, and how often
 * it occurs in the reference and, so far, in the hypothesis. */
typedef struct {
    int32_t start;
    int32_t in_reference;
    int32_t in_hypothesis;
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

static GramSlot *gram_find(GramSlot *slots, Py_ssize_t mask, const int32_t *ref, const int32_t *gram, int n, int insert)
{
    for (Py_ssize_t j = (Py_ssize_t)(gram_hash(gram, n) & (uint64_t)mask);; j = (j + 1) & mask) {
        GramSlot *s = &slots[j];
        if (s->start < 0) {
            if (!insert)
                return NULL;
            s->start = (int32_t)(gram - ref);
            return s;
        }
        if (memcmp(ref + s->start, gram, (size_t)n * sizeof(int32_t)) == 0)
            return s;
    }
}

/* The clipped matches of orders 1 to 4, from the two texts' token ids: each distinct
 * reference token has one of 0 .. distinct - 1, a hypothesis token that is no reference
 * token has -1 (no n-gram holding it can match). 0, or -1 with MemoryError set. */
static int count_matches(const int32_t *ref, Py_ssize_t nr, const int32_t *hyp, Py_ssize_t nh, int32_t distinct,
                         long long *correct)
{
    for (int n = 0; n < MAX_ORDER; n++)
        correct[n] = 0;
    if (nr == 0 || nh == 0)
        return 0;
    /* order 1: counts by id (in the reference, then the hypothesis' clipped by them) */
    int32_t *unigram = PyMem_Calloc(2 * (size_t)distinct, sizeof(int32_t));
    Py_ssize_t size = table_size(nr);
    GramSlot *grams = PyMem_Malloc((size_t)size * sizeof(GramSlot));
    if (unigram == NULL || grams == NULL) {
        PyMem_Free(unigram);
        PyMem_Free(grams);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < nr; i++)
        unigram[ref[i]]++;
    for (Py_ssize_t i = 0; i < nh; i++) {
        int32_t id = hyp[i];
        if (id >= 0 && unigram[distinct + id]++ < unigram[id])
            correct[0]++;
    }
    for (int n = 2; n <= MAX_ORDER; n++) {
        if (nr < n || nh < n)
            break;
        for (Py_ssize_t j = 0; j < size; j++)
            grams[j].start = -1;
        for (Py_ssize_t i = 0; i + n <= nr; i++) {
            GramSlot *s = gram_find(grams, size - 1, ref, ref + i, n, 1);
            if (s->start == i) {
                s->in_reference = 0;
                s->in_hypothesis = 0;
            }
            s->in_reference++;
        }
        Py_ssize_t unknown = -1;  /* the last position of a token that is no reference token */
        for (Py_ssize_t i = 0; i < nh; i++) {
            if (hyp[i] < 0)
                unknown = i;
            if (i + 1 < n || unknown > i - n)
                continue;
            GramSlot *s = gram_find(grams, size - 1, ref, hyp + i + 1 - n, n, 0);
            if (s != NULL && s->in_hypothesis++ < s->in_reference)
                correct[n - 1]++;
        }
    }
    PyMem_Free(unigram);
    PyMem_Free(grams);
    return 0;
}

/* Token ids of Python strings: open addressing over the strings' own hashes,
 * equality by string comparison. The table holds borrowed references: the caller
 * holds the lists. */
typedef struct {
    PyObject *key;
    Py_hash_t hash;
    int32_t id;
} TokenSlot;

static int token_id(TokenSlot *slots, Py_ssize_t mask, PyObject *token, int32_t *next)
{
    Py_hash_t hash = PyObject_Hash(token);
    if (hash == -1)
        return -2;
    for (Py_ssize_t j = (Py_ssize_t)((size_t)hash & (size_t)mask);; j = (j + 1) & mask) {
        TokenSlot *s = &slots[j];
        if (s->key == NULL) {
            if (next == NULL)
                return -1;
            s->key = token;
            s->hash = hash;
            s->id = (*next)++;
            return s->id;
        }
        if (s->hash == hash) {
            int equal = PyObject_RichCompareBool(s->key, token, Py_EQ);
            if (equal < 0)
                return -2;
            if (equal)
                return s->id;
        }
    }
}

static int ids_of(PyObject *list, int32_t *ids, TokenSlot *slots, Py_ssize_t mask, int32_t *next)
{
    Py_ssize_t n = PyList_GET_SIZE(list);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *token = PyList_GET_ITEM(list, i);
        if (!PyUnicode_Check(token)) {
            PyErr_SetString(PyExc_TypeError, "matches: tokens must be str");
            return -1;
        }
        int id = token_id(slots, mask, token, next);
        if (id == -2)
            return -1;
        ids[i] = id;
    }
    return 0;
}

static PyObject *matches(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *hypothesis, *reference;
    if (!PyArg_ParseTuple(args, "O!O!:matches", &PyList_Type, &hypothesis, &PyList_Type, &reference))
        return NULL;
    Py_ssize_t nh = PyList_GET_SIZE(hypothesis), nr = PyList_GET_SIZE(reference);
    if (nh > INT32_MAX / 2 || nr > INT32_MAX / 2) {
        PyErr_SetString(PyExc_OverflowError, "matches: too many tokens");
        return NULL;
    }
    long long correct[MAX_ORDER];
    Py_ssize_t size = table_size(nr);
    TokenSlot *slots = PyMem_Calloc((size_t)size, sizeof(TokenSlot));
    int32_t *ref = PyMem_Malloc((size_t)(nr + nh + 1) * sizeof(int32_t));
    PyObject *result = NULL;
    int32_t distinct = 0;
    if (slots == NULL || ref == NULL)
        PyErr_NoMemory();
    else if (ids_of(reference, ref, slots, size - 1, &distinct) == 0 &&
             ids_of(hypothesis, ref + nr, slots, size - 1, NULL) == 0 &&
             count_matches(ref, nr, ref + nr, nh, distinct, correct) == 0)
        result = Py_BuildValue("(LLLL)", correct[0], correct[1], correct[2], correct[3]);
    PyMem_Free(slots);
    PyMem_Free(ref);
    return result;
}

/* Token ids of spans of the texts' buffers, with no Python string made: the hash is
 * FNV-1a over the code points, and equality compares code points, so that equal tokens
 * of texts of different kinds (1, 2 or 4 bytes a character) are the same token. */
typedef struct {
    const Text *text;
    Py_ssize_t span;
    uint64_t hash;
    int32_t id;
} SpanSlot;

static uint64_t span_hash(const Text *t, const Span *s)
{
    uint64_t h = 0xCBF29CE484222325ull;
    for (Py_ssize_t i = s->start; i < s->start + s->length; i++) {
        h ^= PyUnicode_READ(t->kind, t->data, i);
        h *= 0x100000001B3ull;
    }
    return h;
}

static int span_equal(const Text *a, const Span *x, const Text *b, const Span *y)
{
    if (x->length != y->length)
        return 0;
    if (a->kind == b->kind)
        return memcmp((const char *)a->data + x->start * a->kind, (const char *)b->data + y->start * b->kind,
                      (size_t)x->length * (size_t)a->kind) == 0;
    for (Py_ssize_t k = 0; k < x->length; k++)
        if (PyUnicode_READ(a->kind, a->data, x->start + k) != PyUnicode_READ(b->kind, b->data, y->start + k))
            return 0;
    return 1;
}

static void span_ids(const Text *t, int32_t *ids, SpanSlot *slots, Py_ssize_t mask, int32_t *next)
{
    for (Py_ssize_t i = 0; i < t->count; i++) {
        const Span *span = &t->spans[i];
        uint64_t hash = span_hash(t, span);
        for (Py_ssize_t j = (Py_ssize_t)(hash & (uint64_t)mask);; j = (j + 1) & mask) {
            SpanSlot *s = &slots[j];
            if (s->text == NULL) {
                if (next == NULL) {
                    ids[i] = -1;
                } else {
                    s->text = t;
                    s->span = i;
                    s->hash = hash;
                    ids[i] = s->id = (*next)++;
                }
                break;
            }
            if (s->hash == hash && span_equal(s->text, &s->text->spans[s->span], t, span)) {
                ids[i] = s->id;
                break;
            }
        }
    }
}

static PyObject *statistics(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *hypothesis, *reference, *punctuation;
    uint64_t marked[2];
    Text h, r;
    if (!PyArg_ParseTuple(args, "UUU:statistics", &hypothesis, &reference, &punctuation) ||
        marked_of(punctuation, marked) < 0 || text_of(hypothesis, marked, &h) < 0)
        return NULL;
    if (text_of(reference, marked, &r) < 0) {
        text_free(&h);
        return NULL;
    }
    PyObject *result = NULL;
    long long correct[MAX_ORDER];
    Py_ssize_t nh = h.count, nr = r.count, size = table_size(nr);
    SpanSlot *slots = NULL;
    int32_t *ref = NULL;
    int32_t distinct = 0;
    if (nh > INT32_MAX / 2 || nr > INT32_MAX / 2) {
        PyErr_SetString(PyExc_OverflowError, "statistics: too many tokens");
        goto done;
    }
    slots = PyMem_Calloc((size_t)size, sizeof(SpanSlot));
    ref = PyMem_Malloc((size_t)(nr + nh + 1) * sizeof(int32_t));
    if (slots == NULL || ref == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    span_ids(&r, ref, slots, size - 1, &distinct);
    span_ids(&h, ref + nr, slots, size - 1, NULL);
    if (count_matches(ref, nr, ref + nr, nh, distinct, correct) == 0)
        result = Py_BuildValue("(LLLLnn)", correct[0], correct[1], correct[2], correct[3], nh, nr);
done:
    PyMem_Free(slots);
    PyMem_Free(ref);
    text_free(&h);
    text_free(&r);
    return result;
}

static PyMethodDef methods[] = {
    {"tokens", tokens, METH_VARARGS, "13a's post-tokenizer: punctuation spaced out, the context rules, split()."},
    {"matches", matches, METH_VARARGS, "Clipped n-gram matches of orders 1 to 4 of a hypothesis against a reference."},
    {"statistics", statistics, METH_VARARGS, "matches() of two lines' tokens(), and their token counts."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_bleu13a", NULL, -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__bleu13a(void) { return PyModule_Create(&module); }
