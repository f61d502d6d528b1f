/* The collector's native hot path: the dump's packets split into events, and a rows event's
 * row images decoded, in C.
 *
 * ``scan_packets(buffer, offset, trailer, header_class)`` splits the complete packets of a
 * buffer read from the binlog dump connection into (header, body) pairs, as
 * ``collector.binlog_stream`` does packet by packet in Python: one call per buffer instead of
 * two buffered reads, a header and a slice per event.
 *
 * ``RowPlan`` is built once per table map by ``collector.row_decoder.RowDecoder`` from the
 * same column facts its Python readers are compiled from; ``RowPlan.rows(body, event_type)``
 * then returns what ``RowDecoder.reference_rows`` returns, value for value (the unit and
 * integration tests decode the same events both ways). A column whose wire format is not
 * handled here, or a value whose bytes are outside what the server writes (a DECIMAL group
 * over its digits, an ENUM index past its labels), is read by that column's Python reader,
 * so the two paths cannot disagree on rare inputs.
 *
 * ``build_messages(images, first_row, next_offset, template)`` makes the SimpleBinlog messages
 * of one rows event as ``collector.decoding.build_messages`` does (the offsets still come from
 * the Python OffsetGenerator, one call per row), without a Python-level constructor call per
 * message and position: the frozen dataclasses' slots are filled as object.__setattr__ would.
 *
 * Every read is bounds-checked: a truncated or malformed event raises
 * simple_binlog.errors.ContractError with one sentence, never reads past the buffer.
 * Python's reference path is kept as the specification; this file only makes it fast.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* Bumped with every change of RowPlan's interface: the Python side refuses a stale build. */
#define NATIVE_API_VERSION 4

enum code {
    C_FALLBACK = 0, /* the column's Python reader: fallback(body, offset) -> (value, end) */
    C_INT,          /* width 1/2/3/4/8 little-endian, signed */
    C_UINT,         /* the same, unsigned */
    C_UINT64_TEXT,  /* BIGINT UNSIGNED: decimal text */
    C_FLOAT,
    C_DOUBLE,
    C_DECIMAL,    /* packed DECIMAL as exact text: width = precision, fsp = scale */
    C_DATETIME2,  /* width = fraction bytes, fsp, unit = microseconds per fraction unit */
    C_TIMESTAMP2, /* as DATETIME2; the UTC moment as text */
    C_TIME2,
    C_DATE,
    C_YEAR,
    C_BIT,       /* width bytes, big-endian, as an integer */
    C_ENUM,      /* width bytes, little-endian index into labels ("" first) */
    C_SET,       /* width bytes, little-endian bit mask over labels */
    C_TEXT_UTF8, /* width = length prefix bytes; the bytes decoded as UTF-8 */
    C_BASE64,    /* width = length prefix bytes; the bytes as base64 text, padded with zero
                    bytes to unit bytes (BINARY(n), whose trailing zeros the binlog strips) */
    C_CONVERT,   /* width = length prefix bytes; fallback(bytes) -> value */
    C_LAST
};

#define MAX_GROUPS 16

typedef struct {
    int code;
    int width;
    int fsp;
    long long unit;
    PyObject *name;     /* str */
    PyObject *labels;   /* tuple of str (ENUM, SET) or NULL */
    PyObject *fallback; /* callable or NULL */
    /* DECIMAL: bytes and digits of every group, integral part first */
    int size;
    int integral_groups;
    int groups;
    int group_bytes[MAX_GROUPS];
    int group_digits[MAX_GROUPS];
} Column;

typedef struct {
    PyObject_HEAD
    Py_ssize_t count;
    Column *columns;
    PyObject *schema;
    PyObject *table;
    Py_ssize_t bitmap_bytes;
} RowPlan;

static PyObject *ContractError; /* simple_binlog.errors.ContractError */

static const int COMPRESSED_BYTES[10] = {0, 1, 1, 2, 2, 3, 3, 4, 4, 4};
static const uint32_t POWERS_OF_TEN[10] = {
    1, 10, 100, 1000, 10000, 100000, 1000000, 10000000, 100000000, 1000000000};

static uint64_t
little_endian(const unsigned char *p, int width)
{
    uint64_t value = 0;
    for (int i = width - 1; i >= 0; i--) {
        value = (value << 8) | p[i];
    }
    return value;
}

static uint64_t
big_endian(const unsigned char *p, int width)
{
    uint64_t value = 0;
    for (int i = 0; i < width; i++) {
        value = (value << 8) | p[i];
    }
    return value;
}

static PyObject *
truncated(RowPlan *plan, Column *column, Py_ssize_t offset, Py_ssize_t length)
{
    PyErr_Format(ContractError,
                 "a rows event of %U.%U is truncated or malformed: column %U at byte %zd "
                 "runs past the event's %zd bytes.",
                 plan->schema, plan->table, column->name, offset, length);
    return NULL;
}

/* ``fallback(body, offset) -> (value, end)``: the column's Python reader. */
static PyObject *
call_reader(RowPlan *plan, Column *column, PyObject *body, Py_ssize_t *offset,
            Py_ssize_t length)
{
    PyObject *result = PyObject_CallFunction(column->fallback, "On", body, *offset);
    if (result == NULL) {
        return NULL;
    }
    if (!PyTuple_Check(result) || PyTuple_GET_SIZE(result) != 2) {
        Py_DECREF(result);
        PyErr_Format(PyExc_TypeError, "the reader of column %U did not return (value, end)",
                     column->name);
        return NULL;
    }
    Py_ssize_t end = PyLong_AsSsize_t(PyTuple_GET_ITEM(result, 1));
    if (end == -1 && PyErr_Occurred()) {
        Py_DECREF(result);
        return NULL;
    }
    if (end < *offset || end > length) {
        Py_DECREF(result);
        return truncated(plan, column, *offset, length);
    }
    PyObject *value = PyTuple_GET_ITEM(result, 0);
    Py_INCREF(value);
    Py_DECREF(result);
    *offset = end;
    return value;
}

static PyObject *
ascii_text(const char *text, int length)
{
    if (length < 0) {
        PyErr_SetString(PyExc_SystemError, "formatting a value failed");
        return NULL;
    }
    return PyUnicode_DecodeASCII(text, length, NULL);
}

/* ``"." + f"{micros:06d}"[:fsp]`` appended at ``out + used`` (nothing when fsp is 0). */
static int
append_fraction(char *out, int used, size_t capacity, long long micros, int fsp)
{
    if (fsp == 0) {
        return used;
    }
    char digits[32];
    int count = snprintf(digits, sizeof digits, "%06lld", micros);
    if (count < 0) {
        return -1;
    }
    if (count > fsp) {
        count = fsp;
    }
    if ((size_t)(used + 1 + count) >= capacity) {
        return -1;
    }
    out[used] = '.';
    memcpy(out + used + 1, digits, (size_t)count);
    return used + 1 + count;
}

static PyObject *
zero_datetime(int fsp)
{
    char out[32] = "0000-00-00 00:00:00";
    int used = 19;
    if (fsp > 0 && fsp <= 6) {
        out[used++] = '.';
        for (int i = 0; i < fsp; i++) {
            out[used++] = '0';
        }
    }
    return ascii_text(out, used);
}

/* Days since 1970-01-01 → civil date (Howard Hinnant's days_from_civil, inverted). */
static void
civil_from_days(long long days, long long *year, unsigned *month, unsigned *day)
{
    days += 719468;
    long long era = (days >= 0 ? days : days - 146096) / 146097;
    unsigned doe = (unsigned)(days - era * 146097);
    unsigned yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    long long y = (long long)yoe + era * 400;
    unsigned doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    unsigned mp = (5 * doy + 2) / 153;
    *day = doy - (153 * mp + 2) / 5 + 1;
    *month = mp < 10 ? mp + 3 : mp - 9;
    *year = y + (*month <= 2);
}

static const char BASE64_ALPHABET[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static PyObject *
base64_text(const unsigned char *p, Py_ssize_t length)
{
    Py_ssize_t size = (length + 2) / 3 * 4;
    PyObject *text = PyUnicode_New(size, 127);
    if (text == NULL) {
        return NULL;
    }
    Py_UCS1 *out = PyUnicode_1BYTE_DATA(text);
    Py_ssize_t i = 0, o = 0;
    for (; i + 3 <= length; i += 3) {
        uint32_t v = ((uint32_t)p[i] << 16) | ((uint32_t)p[i + 1] << 8) | p[i + 2];
        out[o++] = BASE64_ALPHABET[(v >> 18) & 63];
        out[o++] = BASE64_ALPHABET[(v >> 12) & 63];
        out[o++] = BASE64_ALPHABET[(v >> 6) & 63];
        out[o++] = BASE64_ALPHABET[v & 63];
    }
    if (length - i == 1) {
        uint32_t v = (uint32_t)p[i] << 16;
        out[o++] = BASE64_ALPHABET[(v >> 18) & 63];
        out[o++] = BASE64_ALPHABET[(v >> 12) & 63];
        out[o++] = '=';
        out[o++] = '=';
    }
    else if (length - i == 2) {
        uint32_t v = ((uint32_t)p[i] << 16) | ((uint32_t)p[i + 1] << 8);
        out[o++] = BASE64_ALPHABET[(v >> 18) & 63];
        out[o++] = BASE64_ALPHABET[(v >> 12) & 63];
        out[o++] = BASE64_ALPHABET[(v >> 6) & 63];
        out[o++] = '=';
    }
    return text;
}

/* A packed DECIMAL as exact text, or NULL without an error set when a group holds more
 * than its digits (the caller then asks the Python reader, which defines that case). */
/* The integral digits out[start:used] as Python's str(int) writes them: no leading zeros,
   "0" when there are none. Returns the new length. */
static int
trim_integral(char *out, int start, int used)
{
    int first = start;
    while (first < used - 1 && out[first] == '0') {
        first++;
    }
    if (first == used) {
        out[used++] = '0';
    }
    else if (first > start) {
        memmove(out + start, out + first, (size_t)(used - first));
        used -= first - start;
    }
    return used;
}

static PyObject *
decimal_text(Column *column, const unsigned char *p, int *unusual)
{
    unsigned char raw[MAX_GROUPS * 4];
    if (column->size <= 0 || column->size > (int)sizeof raw) {
        *unusual = 1;
        return NULL;
    }
    memcpy(raw, p, (size_t)column->size);
    int negative = !(raw[0] & 0x80);
    raw[0] ^= 0x80;
    if (negative) {
        for (int i = 0; i < column->size; i++) {
            raw[i] ^= 0xFF;
        }
    }
    char out[MAX_GROUPS * 9 + 8];
    int used = 0;
    if (negative) {
        out[used++] = '-';
    }
    int integral_start = used;
    int position = 0;
    for (int g = 0; g < column->groups; g++) {
        if (g == column->integral_groups) {
            used = trim_integral(out, integral_start, used);
            out[used++] = '.';
        }
        int width = column->group_bytes[g];
        int digits = column->group_digits[g];
        uint32_t value = (uint32_t)big_endian(raw + position, width);
        position += width;
        if (value >= POWERS_OF_TEN[digits]) {
            *unusual = 1;
            return NULL;
        }
        for (int d = digits - 1; d >= 0; d--) {
            out[used + d] = (char)('0' + value % 10);
            value /= 10;
        }
        used += digits;
    }
    if (column->integral_groups == column->groups) {
        used = trim_integral(out, integral_start, used);
    }
    return ascii_text(out, used);
}

static PyObject *
set_text(Column *column, uint64_t mask)
{
    Py_ssize_t count = PyTuple_GET_SIZE(column->labels);
    PyObject *members = PyList_New(0);
    if (members == NULL) {
        return NULL;
    }
    for (Py_ssize_t bit = 0; bit < count && bit < 64; bit++) {
        if ((mask >> bit) & 1) {
            if (PyList_Append(members, PyTuple_GET_ITEM(column->labels, bit)) < 0) {
                Py_DECREF(members);
                return NULL;
            }
        }
    }
    PyObject *separator = PyUnicode_FromString(",");
    if (separator == NULL) {
        Py_DECREF(members);
        return NULL;
    }
    PyObject *text = PyUnicode_Join(separator, members);
    Py_DECREF(separator);
    Py_DECREF(members);
    return text;
}

/* Bytes a fixed-width column needs at the offset (-1: variable or the Python reader). */
static Py_ssize_t
fixed_width(Column *column)
{
    switch (column->code) {
    case C_INT:
    case C_UINT:
    case C_UINT64_TEXT:
    case C_BIT:
    case C_ENUM:
    case C_SET:
        return column->width;
    case C_FLOAT:
        return 4;
    case C_DOUBLE:
        return 8;
    case C_DECIMAL:
        return column->size;
    case C_DATETIME2:
        return 5 + column->width;
    case C_TIMESTAMP2:
        return 4 + column->width;
    case C_TIME2:
        return 3 + column->width;
    case C_DATE:
        return 3;
    case C_YEAR:
        return 1;
    default:
        return -1;
    }
}

/* One column's value at *offset; *offset moves past it. */
static PyObject *
read_value(RowPlan *plan, Column *column, PyObject *body, const unsigned char *data,
           Py_ssize_t *offset, Py_ssize_t length)
{
    Py_ssize_t at = *offset;
    Py_ssize_t need = fixed_width(column);
    if (column->code == C_FALLBACK) {
        return call_reader(plan, column, body, offset, length);
    }
    if (need >= 0) {
        if (need > length - at) {
            return truncated(plan, column, at, length);
        }
        *offset = at + need;
    }
    const unsigned char *p = data + at;
    char out[64];
    switch (column->code) {
    case C_INT: {
        uint64_t raw = little_endian(p, column->width);
        int bits = column->width * 8;
        int64_t value;
        if (bits < 64 && (raw >> (bits - 1)) & 1) {
            value = (int64_t)(raw | (~(uint64_t)0 << bits));
        }
        else {
            value = (int64_t)raw;
        }
        return PyLong_FromLongLong(value);
    }
    case C_UINT:
        return PyLong_FromUnsignedLongLong(little_endian(p, column->width));
    case C_UINT64_TEXT: {
        int used = snprintf(out, sizeof out, "%llu",
                            (unsigned long long)little_endian(p, column->width));
        return ascii_text(out, used);
    }
    case C_FLOAT: {
        uint32_t raw = (uint32_t)little_endian(p, 4);
        float value;
        memcpy(&value, &raw, 4);
        return PyFloat_FromDouble((double)value);
    }
    case C_DOUBLE: {
        uint64_t raw = little_endian(p, 8);
        double value;
        memcpy(&value, &raw, 8);
        return PyFloat_FromDouble(value);
    }
    case C_DECIMAL: {
        int unusual = 0;
        PyObject *text = decimal_text(column, p, &unusual);
        if (text == NULL && unusual) {
            *offset = at;
            return call_reader(plan, column, body, offset, length);
        }
        return text;
    }
    case C_DATETIME2: {
        int64_t packed = (int64_t)big_endian(p, 5) - (int64_t)0x8000000000LL;
        if (packed < 0) { /* not a value the server writes: the reference decides */
            *offset = at;
            return call_reader(plan, column, body, offset, length);
        }
        long long micros = (long long)big_endian(p + 5, column->width) * column->unit;
        int64_t day_part = packed >> 17, time_part = packed & 0x1FFFF;
        int64_t year_month = day_part >> 5;
        int64_t year = year_month / 13, month = year_month % 13, day = day_part & 31;
        /* A zero year, month or day (permissive sql_modes) is printed as it is, as MySQL does. */
        int used = snprintf(out, sizeof out, "%04lld-%02lld-%02lld %02lld:%02lld:%02lld",
                            (long long)year, (long long)month, (long long)day,
                            (long long)(time_part >> 12), (long long)((time_part >> 6) & 63),
                            (long long)(time_part & 63));
        used = append_fraction(out, used, sizeof out, micros, column->fsp);
        return ascii_text(out, used);
    }
    case C_TIMESTAMP2: {
        long long seconds = (long long)big_endian(p, 4);
        long long micros = (long long)big_endian(p + 4, column->width) * column->unit;
        if (seconds == 0 && micros == 0) {
            return zero_datetime(column->fsp);
        }
        long long year;
        unsigned month, day;
        civil_from_days(seconds / 86400, &year, &month, &day);
        long long clock = seconds % 86400;
        int used = snprintf(out, sizeof out, "%04lld-%02u-%02u %02lld:%02lld:%02lld", year,
                            month, day, clock / 3600, clock / 60 % 60, clock % 60);
        used = append_fraction(out, used, sizeof out, micros, column->fsp);
        return ascii_text(out, used);
    }
    case C_TIME2: {
        int width = column->width;
        int64_t packed = (int64_t)big_endian(p, 3 + width) - ((int64_t)0x800000 << (8 * width));
        const char *sign = packed < 0 ? "-" : "";
        int64_t magnitude = packed < 0 ? -packed : packed;
        int64_t whole = magnitude >> (8 * width);
        int64_t fraction = magnitude & (((int64_t)1 << (8 * width)) - 1);
        int used = snprintf(out, sizeof out, "%s%02lld:%02lld:%02lld", sign,
                            (long long)((whole >> 12) & 0x3FF), (long long)((whole >> 6) & 0x3F),
                            (long long)(whole & 0x3F));
        used = append_fraction(out, used, sizeof out, (long long)(fraction * column->unit),
                               column->fsp);
        return ascii_text(out, used);
    }
    case C_DATE: {
        uint64_t packed = little_endian(p, 3);
        unsigned year = (unsigned)(packed >> 9), month = (packed >> 5) & 15, day = packed & 31;
        /* A zero year, month or day (permissive sql_modes) is kept as MySQL prints it. */
        int used = snprintf(out, sizeof out, "%04u-%02u-%02u", year, month, day);
        return ascii_text(out, used);
    }
    case C_YEAR:
        return PyLong_FromLong(p[0] ? p[0] + 1900 : 0);
    case C_BIT:
        return PyLong_FromUnsignedLongLong(big_endian(p, column->width));
    case C_ENUM: {
        uint64_t index = little_endian(p, column->width);
        if (index >= (uint64_t)PyTuple_GET_SIZE(column->labels)) {
            *offset = at;
            return call_reader(plan, column, body, offset, length);
        }
        PyObject *label = PyTuple_GET_ITEM(column->labels, (Py_ssize_t)index);
        Py_INCREF(label);
        return label;
    }
    case C_SET:
        return set_text(column, little_endian(p, column->width));
    case C_TEXT_UTF8:
    case C_BASE64:
    case C_CONVERT: {
        if (column->width > length - at) {
            return truncated(plan, column, at, length);
        }
        Py_ssize_t size = (Py_ssize_t)little_endian(p, column->width);
        Py_ssize_t start = at + column->width;
        if (size > length - start) {
            return truncated(plan, column, at, length);
        }
        *offset = start + size;
        const unsigned char *bytes = data + start;
        if (column->code == C_TEXT_UTF8) {
            return PyUnicode_DecodeUTF8((const char *)bytes, size, NULL);
        }
        if (column->code == C_BASE64) {
            if (size >= column->unit) {
                return base64_text(bytes, size);
            }
            unsigned char padded[256] = {0};
            memcpy(padded, bytes, (size_t)size);
            return base64_text(padded, (Py_ssize_t)column->unit);
        }
        PyObject *raw = PyBytes_FromStringAndSize((const char *)bytes, size);
        if (raw == NULL) {
            return NULL;
        }
        PyObject *value = PyObject_CallOneArg(column->fallback, raw);
        Py_DECREF(raw);
        return value;
    }
    default:
        PyErr_Format(PyExc_SystemError, "column %U has an unknown native code %d",
                     column->name, column->code);
        return NULL;
    }
}

static PyObject *
read_row(RowPlan *plan, PyObject *body, const unsigned char *data, Py_ssize_t *offset,
         Py_ssize_t length)
{
    Py_ssize_t at = *offset;
    if (plan->bitmap_bytes > length - at) {
        PyErr_Format(ContractError,
                     "a rows event of %U.%U is truncated or malformed: its NULL bitmap at byte "
                     "%zd runs past the event's %zd bytes.",
                     plan->schema, plan->table, at, length);
        return NULL;
    }
    const unsigned char *nulls = data + at;
    *offset = at + plan->bitmap_bytes;
    PyObject *row = _PyDict_NewPresized(plan->count);
    if (row == NULL) {
        return NULL;
    }
    for (Py_ssize_t i = 0; i < plan->count; i++) {
        Column *column = &plan->columns[i];
        PyObject *value;
        if ((nulls[i >> 3] >> (i & 7)) & 1) {
            value = Py_None;
            Py_INCREF(value);
        }
        else {
            value = read_value(plan, column, body, data, offset, length);
            if (value == NULL) {
                Py_DECREF(row);
                return NULL;
            }
        }
        int failed = PyDict_SetItem(row, column->name, value);
        Py_DECREF(value);
        if (failed) {
            Py_DECREF(row);
            return NULL;
        }
    }
    return row;
}

static int
read_lenenc(RowPlan *plan, const unsigned char *data, Py_ssize_t length, Py_ssize_t *offset,
            uint64_t *value)
{
    Py_ssize_t at = *offset;
    if (at >= length) {
        goto short_event;
    }
    unsigned first = data[at];
    int width;
    if (first < 0xFB) {
        *value = first;
        *offset = at + 1;
        return 0;
    }
    if (first == 0xFC) {
        width = 2;
    }
    else if (first == 0xFD) {
        width = 3;
    }
    else if (first == 0xFE) {
        width = 8;
    }
    else {
        PyErr_Format(ContractError,
                     "malformed length-encoded integer (0x%02x) in a binlog event.", first);
        return -1;
    }
    if (width > length - at - 1) {
        goto short_event;
    }
    *value = little_endian(data + at + 1, width);
    *offset = at + 1 + width;
    return 0;
short_event:
    PyErr_Format(ContractError,
                 "a rows event of %U.%U is truncated: its header runs past the event's %zd "
                 "bytes.",
                 plan->schema, plan->table, length);
    return -1;
}

#define WRITE_ROWS_V2 30
#define UPDATE_ROWS_V1 24
#define UPDATE_ROWS_V2 31

PyDoc_STRVAR(rows_doc,
             "rows(body, event_type) -> [(before image of an UPDATE or None, content), ...]\n\n"
             "The rows of a rows event body (checksum cut off), as "
             "RowDecoder.reference_rows returns them.");

static PyObject *
RowPlan_rows(RowPlan *plan, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyBytes_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "rows(body: bytes, event_type: int)");
        return NULL;
    }
    PyObject *body = args[0];
    long event_type = PyLong_AsLong(args[1]);
    if (event_type == -1 && PyErr_Occurred()) {
        return NULL;
    }
    const unsigned char *data = (const unsigned char *)PyBytes_AS_STRING(body);
    Py_ssize_t length = PyBytes_GET_SIZE(body);
    Py_ssize_t offset = 8;
    if (length < 10) {
        PyErr_Format(ContractError,
                     "a rows event of %U.%U is truncated: %zd bytes hold no rows header.",
                     plan->schema, plan->table, length);
        return NULL;
    }
    if (event_type >= WRITE_ROWS_V2) {
        offset += (Py_ssize_t)little_endian(data + 8, 2);
    }
    uint64_t count;
    if (read_lenenc(plan, data, length, &offset, &count) < 0) {
        return NULL;
    }
    if (count != (uint64_t)plan->count) {
        PyErr_Format(ContractError, "a rows event of %U.%U has %llu columns, its table map %zd.",
                     plan->schema, plan->table, (unsigned long long)count, plan->count);
        return NULL;
    }
    int update = event_type == UPDATE_ROWS_V1 || event_type == UPDATE_ROWS_V2;
    for (int image = 0; image < (update ? 2 : 1); image++) {
        /* every column present (the bits past the last column are padding: MySQL sets them,
           MariaDB clears them), the same test as the reference's */
        int complete = plan->bitmap_bytes <= length - offset;
        for (Py_ssize_t i = 0; complete && i < plan->count; i++) {
            complete = (data[offset + (i >> 3)] >> (i & 7)) & 1;
        }
        if (!complete) {
            PyErr_Format(ContractError,
                         "%U.%U is missing columns in the binlog row image; set "
                         "binlog_row_image=FULL on the server.",
                         plan->schema, plan->table);
            return NULL;
        }
        offset += plan->bitmap_bytes;
    }
    PyObject *rows = PyList_New(0);
    if (rows == NULL) {
        return NULL;
    }
    while (offset < length) {
        Py_ssize_t row_start = offset;
        PyObject *first = read_row(plan, body, data, &offset, length);
        if (first == NULL) {
            goto failed;
        }
        if (offset == row_start) {
            /* Only a table map without columns reads no bytes: without this the loop would
               append empty rows until memory runs out. */
            Py_DECREF(first);
            PyErr_Format(ContractError,
                         "%U.%U: a rows event holds data for a table map without columns; "
                         "the event is malformed.",
                         plan->schema, plan->table);
            goto failed;
        }
        PyObject *pair;
        if (update) {
            PyObject *second = read_row(plan, body, data, &offset, length);
            if (second == NULL) {
                Py_DECREF(first);
                goto failed;
            }
            pair = PyTuple_Pack(2, first, second);
            Py_DECREF(second);
        }
        else {
            pair = PyTuple_Pack(2, Py_None, first);
        }
        Py_DECREF(first);
        if (pair == NULL) {
            goto failed;
        }
        int appended = PyList_Append(rows, pair);
        Py_DECREF(pair);
        if (appended < 0) {
            goto failed;
        }
    }
    return rows;
failed:
    Py_DECREF(rows);
    return NULL;
}

static void
RowPlan_clear_columns(RowPlan *plan)
{
    if (plan->columns == NULL) {
        return;
    }
    for (Py_ssize_t i = 0; i < plan->count; i++) {
        Py_XDECREF(plan->columns[i].name);
        Py_XDECREF(plan->columns[i].labels);
        Py_XDECREF(plan->columns[i].fallback);
    }
    PyMem_Free(plan->columns);
    plan->columns = NULL;
}

static void
RowPlan_dealloc(RowPlan *plan)
{
    RowPlan_clear_columns(plan);
    Py_XDECREF(plan->schema);
    Py_XDECREF(plan->table);
    Py_TYPE(plan)->tp_free((PyObject *)plan);
}

/* DECIMAL(precision, scale): MySQL's groups of 9 digits in 4 bytes, leftovers in 1-4. */
static int
decimal_layout(Column *column, int precision, int scale)
{
    if (precision < 1 || precision > 65 || scale < 0 || scale > precision) {
        return -1;
    }
    int integral = precision - scale;
    int g = 0;
    if (integral % 9) {
        column->group_digits[g++] = integral % 9;
    }
    for (int i = 0; i < integral / 9; i++) {
        column->group_digits[g++] = 9;
    }
    column->integral_groups = g;
    for (int i = 0; i < scale / 9; i++) {
        column->group_digits[g++] = 9;
    }
    if (scale % 9) {
        column->group_digits[g++] = scale % 9;
    }
    column->groups = g;
    column->size = 0;
    for (int i = 0; i < g; i++) {
        column->group_bytes[i] = COMPRESSED_BYTES[column->group_digits[i]];
        column->size += column->group_bytes[i];
    }
    return column->size > 0 ? 0 : -1;
}

static int
RowPlan_init(RowPlan *plan, PyObject *args, PyObject *kwargs)
{
    PyObject *schema, *table, *specs;
    static char *keywords[] = {"schema", "table", "columns", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "UUO!", keywords, &schema, &table,
                                     &PyTuple_Type, &specs)) {
        return -1;
    }
    RowPlan_clear_columns(plan);
    Py_INCREF(schema);
    Py_XSETREF(plan->schema, schema);
    Py_INCREF(table);
    Py_XSETREF(plan->table, table);
    Py_ssize_t count = PyTuple_GET_SIZE(specs);
    plan->columns = PyMem_Calloc((size_t)(count ? count : 1), sizeof(Column));
    if (plan->columns == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    plan->count = count;
    plan->bitmap_bytes = (count + 7) / 8;
    for (Py_ssize_t i = 0; i < count; i++) {
        Column *column = &plan->columns[i];
        PyObject *name, *labels, *fallback;
        int code, width, fsp, precision;
        long long unit;
        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(specs, i), "UiiiLOO;a column spec is "
                              "(name, code, width, fsp, unit, labels, fallback)",
                              &name, &code, &width, &fsp, &unit, &labels, &fallback)) {
            return -1;
        }
        column->code = code;
        column->width = width;
        column->fsp = fsp;
        column->unit = unit;
        Py_INCREF(name);
        PyUnicode_InternInPlace(&name);
        column->name = name;
        if (labels != Py_None) {
            if (!PyTuple_Check(labels)) {
                PyErr_SetString(PyExc_TypeError, "labels must be a tuple or None");
                return -1;
            }
            Py_INCREF(labels);
            column->labels = labels;
        }
        if (fallback != Py_None) {
            Py_INCREF(fallback);
            column->fallback = fallback;
        }
        precision = (int)unit; /* DECIMAL: unit carries the precision, fsp the scale */
        int needs_fallback = code == C_FALLBACK || code == C_DECIMAL || code == C_CONVERT ||
                             code == C_DATETIME2 || code == C_ENUM;
        int bad = code < 0 || code >= C_LAST || (needs_fallback && column->fallback == NULL) ||
                  ((code == C_ENUM || code == C_SET) && column->labels == NULL);
        switch (code) {
        case C_INT:
        case C_UINT:
            bad |= !(width == 1 || width == 2 || width == 3 || width == 4 || width == 8);
            break;
        case C_UINT64_TEXT:
            bad |= width != 8;
            break;
        case C_DECIMAL:
            bad |= decimal_layout(column, precision, fsp) < 0;
            break;
        case C_DATETIME2:
        case C_TIMESTAMP2:
        case C_TIME2:
            bad |= width < 0 || width > 3 || fsp < 0 || fsp > 6;
            break;
        case C_BIT:
        case C_ENUM:
        case C_SET:
            bad |= width < 0 || width > 8;
            break;
        case C_BASE64:
            bad |= unit < 0 || unit > 255; /* BINARY(n) holds at most 255 bytes */
            bad |= width < 1 || width > 4;
            break;
        case C_TEXT_UTF8:
        case C_CONVERT:
            bad |= width < 1 || width > 4;
            break;
        default:
            break;
        }
        if (bad) {
            PyErr_Format(PyExc_ValueError, "column %U: native spec (code %d, width %d) is "
                         "inconsistent", name, code, width);
            return -1;
        }
    }
    return 0;
}

/* -- the dump's packets ------------------------------------------------------------------ */

#define PACKET_HEADER 4
#define EVENT_HEADER 19
#define MAX_PACKET 0xFFFFFF

enum scan_stop { SCAN_MORE = 0, SCAN_LARGE = 1, SCAN_ERROR = 2, SCAN_EOF = 3 };

PyDoc_STRVAR(scan_doc,
             "scan_packets(buffer, offset, trailer, header_class) -> (events, offset, stop)\n\n"
             "The events of the complete packets in buffer[offset:], each (header, body) with "
             "header = header_class(timestamp, type, server_id, size, log_pos) and body the event "
             "after its header without the trailer (checksum) bytes; offset: where the first "
             "packet not consumed starts; stop: 0 more bytes are needed, 1 a packet of 16 MiB "
             "or more starts there (continued in further packets), 2 an error packet starts "
             "there, 3 the server ended the stream (EOF packet, consumed).");

static PyObject *
scan_packets(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 4 || !PyBytes_Check(args[0]) || !PyType_Check(args[3]) ||
        !PyType_IsSubtype((PyTypeObject *)args[3], &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError,
                        "scan_packets(buffer: bytes, offset: int, trailer: int, header_class)");
        return NULL;
    }
    const unsigned char *data = (const unsigned char *)PyBytes_AS_STRING(args[0]);
    Py_ssize_t length = PyBytes_GET_SIZE(args[0]);
    Py_ssize_t offset = PyLong_AsSsize_t(args[1]);
    if (offset == -1 && PyErr_Occurred()) {
        return NULL;
    }
    long trailer = PyLong_AsLong(args[2]);
    if (trailer == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (offset < 0 || offset > length || trailer < 0 || trailer > 8) {
        PyErr_SetString(PyExc_ValueError, "scan_packets: offset or trailer out of range");
        return NULL;
    }
    PyTypeObject *header_class = (PyTypeObject *)args[3];
    PyObject *events = PyList_New(0);
    if (events == NULL) {
        return NULL;
    }
    int stop = SCAN_MORE;
    while (length - offset >= PACKET_HEADER) {
        const unsigned char *packet = data + offset;
        Py_ssize_t size = (Py_ssize_t)little_endian(packet, 3);
        if (size == MAX_PACKET) {
            stop = SCAN_LARGE;
            break;
        }
        if (size > length - offset - PACKET_HEADER) {
            break; /* incomplete: the caller reads more */
        }
        const unsigned char *payload = packet + PACKET_HEADER;
        if (size == 0) {
            PyErr_SetString(ContractError, "the binlog dump sent an empty packet.");
            goto failed;
        }
        unsigned marker = payload[0];
        if (marker == 0xFF) {
            stop = SCAN_ERROR;
            break;
        }
        offset += PACKET_HEADER + size;
        if (marker == 0xFE && size < 9) {
            stop = SCAN_EOF;
            break;
        }
        if (marker != 0x00) {
            continue; /* not an event: the Python reader skips these too */
        }
        if (size < 1 + EVENT_HEADER + trailer) {
            PyErr_Format(ContractError,
                         "the binlog dump sent a packet of %zd bytes, too short for an event.",
                         size);
            goto failed;
        }
        const unsigned char *event = payload + 1;
        PyObject *header = header_class->tp_alloc(header_class, 5);
        if (header == NULL) {
            goto failed;
        }
        PyObject *fields[5] = {
            PyLong_FromUnsignedLong((unsigned long)little_endian(event, 4)),
            PyLong_FromLong(event[4]),
            PyLong_FromUnsignedLong((unsigned long)little_endian(event + 5, 4)),
            PyLong_FromUnsignedLong((unsigned long)little_endian(event + 9, 4)),
            PyLong_FromUnsignedLong((unsigned long)little_endian(event + 13, 4)),
        };
        int missing = 0;
        for (int i = 0; i < 5; i++) {
            missing |= fields[i] == NULL;
            PyTuple_SET_ITEM(header, i, fields[i]);
        }
        if (missing) {
            Py_DECREF(header);
            goto failed;
        }
        PyObject *body = PyBytes_FromStringAndSize(
            (const char *)(event + EVENT_HEADER), size - 1 - EVENT_HEADER - trailer);
        if (body == NULL) {
            Py_DECREF(header);
            goto failed;
        }
        PyObject *pair = PyTuple_Pack(2, header, body);
        Py_DECREF(header);
        Py_DECREF(body);
        if (pair == NULL) {
            goto failed;
        }
        int appended = PyList_Append(events, pair);
        Py_DECREF(pair);
        if (appended < 0) {
            goto failed;
        }
    }
    return Py_BuildValue("(Nni)", events, offset, stop);
failed:
    Py_DECREF(events);
    return NULL;
}

/* -- messages ------------------------------------------------------------------------------ */

/* Field names of simple_binlog.message.SimpleBinlog and BinlogPosition, in the order the
 * template and the rows fill them; the Python side checks the dataclasses still have exactly
 * these fields before it uses build_messages. */
static const char *MESSAGE_FIELDS[] = {
    "binlog_offset", "execute_time", "event_type",  "schema_name", "table_name",
    "source",        "content",      "column_types", "primary_keys", "before_content",
    "position",      "version",      "extra"};
static const char *POSITION_FIELDS[] = {"server_id", "file", "pos", "row_index", "gtid"};
#define MESSAGE_FIELD_COUNT 13
#define POSITION_FIELD_COUNT 5
static PyObject *message_names[MESSAGE_FIELD_COUNT];
static PyObject *position_names[POSITION_FIELD_COUNT];

enum template_item {
    T_MESSAGE_CLASS,
    T_POSITION_CLASS,
    T_SECOND,
    T_EXECUTE_TIME,
    T_EVENT_TYPE,
    T_SCHEMA,
    T_TABLE,
    T_SOURCE,
    T_COLUMN_TYPES,
    T_PRIMARY_KEYS,
    T_SERVER_ID,
    T_FILE,
    T_POS,
    T_GTID,
    T_VERSION,
    T_COUNT
};

static PyObject *
new_instance(PyObject *cls, PyObject **names, PyObject **values, int count)
{
    PyTypeObject *type = (PyTypeObject *)cls;
    PyObject *instance = type->tp_alloc(type, 0);
    if (instance == NULL) {
        return NULL;
    }
    for (int i = 0; i < count; i++) {
        if (PyObject_GenericSetAttr(instance, names[i], values[i]) < 0) {
            Py_DECREF(instance);
            return NULL;
        }
    }
    return instance;
}

PyDoc_STRVAR(build_messages_doc,
             "build_messages(images, first_row, next_offset, template) -> [SimpleBinlog, ...]\n\n"
             "One message per (before, content) image, row_index from first_row, binlog_offset "
             "= next_offset(second); template: (message class, position class, second, "
             "execute_time, event_type, schema, table, source, column_types, primary_keys, "
             "server_id, file, pos, gtid, version).");

static PyObject *
build_messages(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 4 || !PyList_Check(args[0]) || !PyTuple_Check(args[3]) ||
        PyTuple_GET_SIZE(args[3]) != T_COUNT || !PyType_Check(PyTuple_GET_ITEM(args[3], 0)) ||
        !PyType_Check(PyTuple_GET_ITEM(args[3], 1))) {
        PyErr_SetString(PyExc_TypeError,
                        "build_messages(images: list, first_row: int, next_offset, template)");
        return NULL;
    }
    PyObject *images = args[0];
    Py_ssize_t first_row = PyLong_AsSsize_t(args[1]);
    if (first_row == -1 && PyErr_Occurred()) {
        return NULL;
    }
    PyObject *next_offset = args[2];
    PyObject *const *template = &PyTuple_GET_ITEM(args[3], 0);
    Py_ssize_t count = PyList_GET_SIZE(images);
    PyObject *messages = PyList_New(count);
    if (messages == NULL) {
        return NULL;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *image = PyList_GET_ITEM(images, i);
        if (!PyTuple_Check(image) || PyTuple_GET_SIZE(image) != 2) {
            PyErr_SetString(PyExc_TypeError, "an image is (before or None, content)");
            goto failed;
        }
        PyObject *offset = PyObject_CallOneArg(next_offset, template[T_SECOND]);
        if (offset == NULL) {
            goto failed;
        }
        PyObject *row_index = PyLong_FromSsize_t(first_row + i);
        if (row_index == NULL) {
            Py_DECREF(offset);
            goto failed;
        }
        PyObject *position_values[POSITION_FIELD_COUNT] = {
            template[T_SERVER_ID], template[T_FILE], template[T_POS], row_index,
            template[T_GTID]};
        PyObject *position =
            new_instance(template[T_POSITION_CLASS], position_names, position_values,
                         POSITION_FIELD_COUNT);
        Py_DECREF(row_index);
        PyObject *extra = position == NULL ? NULL : PyDict_New();
        if (extra == NULL) {
            Py_XDECREF(position);
            Py_DECREF(offset);
            goto failed;
        }
        PyObject *message_values[MESSAGE_FIELD_COUNT] = {
            offset,
            template[T_EXECUTE_TIME],
            template[T_EVENT_TYPE],
            template[T_SCHEMA],
            template[T_TABLE],
            template[T_SOURCE],
            PyTuple_GET_ITEM(image, 1),
            template[T_COLUMN_TYPES],
            template[T_PRIMARY_KEYS],
            PyTuple_GET_ITEM(image, 0),
            position,
            template[T_VERSION],
            extra};
        PyObject *message = new_instance(template[T_MESSAGE_CLASS], message_names,
                                         message_values, MESSAGE_FIELD_COUNT);
        Py_DECREF(offset);
        Py_DECREF(position);
        Py_DECREF(extra);
        if (message == NULL) {
            goto failed;
        }
        PyList_SET_ITEM(messages, i, message);
    }
    return messages;
failed:
    Py_DECREF(messages);
    return NULL;
}

static PyMethodDef native_functions[] = {
    {"scan_packets", (PyCFunction)(void (*)(void))scan_packets, METH_FASTCALL, scan_doc},
    {"build_messages", (PyCFunction)(void (*)(void))build_messages, METH_FASTCALL,
     build_messages_doc},
    {NULL, NULL, 0, NULL},
};

static PyMethodDef RowPlan_methods[] = {
    {"rows", (PyCFunction)(void (*)(void))RowPlan_rows, METH_FASTCALL, rows_doc},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject RowPlanType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "collector._native.RowPlan",
    .tp_doc = PyDoc_STR("A table map's row decoding, compiled: RowPlan(schema, table, columns)."),
    .tp_basicsize = sizeof(RowPlan),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)RowPlan_init,
    .tp_dealloc = (destructor)RowPlan_dealloc,
    .tp_methods = RowPlan_methods,
};

static struct PyModuleDef native_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "collector._native",
    .m_doc = PyDoc_STR("The collector's hot path in C (see collector/_native.c)."),
    .m_size = -1,
    .m_methods = native_functions,
};

PyMODINIT_FUNC
PyInit__native(void)
{
    PyObject *errors = PyImport_ImportModule("simple_binlog.errors");
    if (errors == NULL) {
        return NULL;
    }
    ContractError = PyObject_GetAttrString(errors, "ContractError");
    Py_DECREF(errors);
    if (ContractError == NULL) {
        return NULL;
    }
    if (PyType_Ready(&RowPlanType) < 0) {
        return NULL;
    }
    for (int i = 0; i < MESSAGE_FIELD_COUNT; i++) {
        message_names[i] = PyUnicode_InternFromString(MESSAGE_FIELDS[i]);
        if (message_names[i] == NULL) {
            return NULL;
        }
    }
    for (int i = 0; i < POSITION_FIELD_COUNT; i++) {
        position_names[i] = PyUnicode_InternFromString(POSITION_FIELDS[i]);
        if (position_names[i] == NULL) {
            return NULL;
        }
    }
    PyObject *module = PyModule_Create(&native_module);
    if (module == NULL) {
        return NULL;
    }
    PyObject *message_fields = PyTuple_New(MESSAGE_FIELD_COUNT);
    PyObject *position_fields = PyTuple_New(POSITION_FIELD_COUNT);
    if (message_fields == NULL || position_fields == NULL) {
        Py_XDECREF(message_fields);
        Py_XDECREF(position_fields);
        Py_DECREF(module);
        return NULL;
    }
    for (int i = 0; i < MESSAGE_FIELD_COUNT; i++) {
        Py_INCREF(message_names[i]);
        PyTuple_SET_ITEM(message_fields, i, message_names[i]);
    }
    for (int i = 0; i < POSITION_FIELD_COUNT; i++) {
        Py_INCREF(position_names[i]);
        PyTuple_SET_ITEM(position_fields, i, position_names[i]);
    }
    int added = PyModule_AddObjectRef(module, "MESSAGE_FIELDS", message_fields) < 0 ||
                PyModule_AddObjectRef(module, "POSITION_FIELDS", position_fields) < 0;
    Py_DECREF(message_fields);
    Py_DECREF(position_fields);
    if (added) {
        Py_DECREF(module);
        return NULL;
    }
    if (PyModule_AddIntConstant(module, "API_VERSION", NATIVE_API_VERSION) < 0 ||
        PyModule_AddObjectRef(module, "RowPlan", (PyObject *)&RowPlanType) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    if (PyModule_AddIntConstant(module, "SCAN_MORE", SCAN_MORE) < 0 ||
        PyModule_AddIntConstant(module, "SCAN_LARGE", SCAN_LARGE) < 0 ||
        PyModule_AddIntConstant(module, "SCAN_ERROR", SCAN_ERROR) < 0 ||
        PyModule_AddIntConstant(module, "SCAN_EOF", SCAN_EOF) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    const char *names[] = {"FALLBACK", "INT", "UINT", "UINT64_TEXT", "FLOAT", "DOUBLE",
                           "DECIMAL", "DATETIME2", "TIMESTAMP2", "TIME2", "DATE", "YEAR",
                           "BIT", "ENUM", "SET", "TEXT_UTF8", "BASE64", "CONVERT"};
    for (int code = 0; code < C_LAST; code++) {
        if (PyModule_AddIntConstant(module, names[code], code) < 0) {
            Py_DECREF(module);
            return NULL;
        }
    }
    return module;
}
