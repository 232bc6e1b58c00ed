/* Sums the per-process counter files <dir>/<tl>.<pid> and checks expectations on them. */
#include "ucp_ext.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_COUNTERS 128

/* "<tl>.<digits>" exactly: skips "<tl>.<pid>.tmp" files still being written and other transports */
static int is_counter_file(const char *name, const char *tl)
{
    size_t n = strlen(tl);
    const char *p;

    if ((strncmp(name, tl, n) != 0) || (name[n] != '.') || !isdigit((unsigned char)name[n + 1])) {
        return 0;
    }
    for (p = name + n + 1; *p; ++p) {
        if (!isdigit((unsigned char)*p)) {
            return 0;
        }
    }
    return 1;
}

static void add_counter(ucp_ext_counter_t *all, int *count, const char *name, uint64_t value)
{
    int i;

    for (i = 0; i < *count; ++i) {
        if (!strcmp(all[i].name, name)) {
            all[i].value += value;
            return;
        }
    }
    if (*count < MAX_COUNTERS) {
        snprintf(all[*count].name, UCP_EXT_NAME_MAX, "%s", name);
        all[*count].value = value;
        ++*count;
    }
}

static int read_all(const char *dir, const char *tl, ucp_ext_counter_t *all, int *files_p)
{
    char path[4096], name[UCP_EXT_NAME_MAX];
    unsigned long long value;
    struct dirent *de;
    int count = 0;
    DIR *d;
    FILE *f;

    *files_p = 0;
    d = opendir(dir);
    if (d == NULL) {
        return -1;
    }
    while ((de = readdir(d)) != NULL) {
        if (!is_counter_file(de->d_name, tl)) {
            continue;
        }
        snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
        f = fopen(path, "r");
        if (f == NULL) {
            continue;
        }
        ++*files_p;
        while (fscanf(f, "%31s %llu", name, &value) == 2) {
            add_counter(all, &count, name, value);
        }
        fclose(f);
    }
    closedir(d);
    return count;
}

int ucp_ext_counters_read(const char *dir, const char *tl, ucp_ext_counter_t *counters, int max,
                          int *files_p)
{
    ucp_ext_counter_t all[MAX_COUNTERS];
    int files, count = read_all(dir, tl, all, &files);

    if (files_p != NULL) {
        *files_p = files;
    }
    if (count > 0) {
        memcpy(counters, all, sizeof(*all) * (count < max ? count : max));
    }
    return count;
}

static uint64_t lookup(const ucp_ext_counter_t *all, int count, const char *name)
{
    int i;

    for (i = 0; i < count; ++i) {
        if (!strcmp(all[i].name, name)) {
            return all[i].value;
        }
    }
    return 0;
}

/* "name OP number" -> 1 holds, 0 does not, -1 syntax error; the value seen goes to *value_p */
static int eval_one(const ucp_ext_counter_t *all, int count, const char *cond, uint64_t *value_p)
{
    char name[UCP_EXT_NAME_MAX], op[3] = "";
    unsigned long long want;
    size_t n = strspn(cond, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_");
    size_t o;
    uint64_t v;

    if ((n == 0) || (n >= sizeof(name))) {
        return -1;
    }
    memcpy(name, cond, n);
    name[n] = '\0';
    o = strspn(cond + n, "<>=!");
    if ((o == 0) || (o > 2) || (sscanf(cond + n + o, "%llu", &want) != 1)) {
        return -1;
    }
    memcpy(op, cond + n, o);
    v        = lookup(all, count, name);
    *value_p = v;
    if (!strcmp(op, ">"))  return v > want;
    if (!strcmp(op, ">=")) return v >= want;
    if (!strcmp(op, "==")) return v == want;
    if (!strcmp(op, "<"))  return v < want;
    if (!strcmp(op, "<=")) return v <= want;
    if (!strcmp(op, "!=")) return v != want;
    return -1;
}

int ucp_ext_counters_expect(const char *dir, const char *tl, const char *expr, char *why,
                            size_t why_len)
{
    ucp_ext_counter_t all[MAX_COUNTERS];
    char *copy, *cond, *alt, *save1 = NULL, *save2 = NULL;
    char failed[512];
    int files, count, held, r;
    size_t off = 0, foff;
    uint64_t v;

    why[0] = '\0';
    count  = read_all(dir, tl, all, &files);
    if (count < 0) {
        snprintf(why, why_len, "cannot read counters dir %s: %s", dir, strerror(errno));
        return -1;
    }
    if (files == 0) {
        snprintf(why, why_len, "no %s.<pid> counter file in %s (transport not loaded?)", tl, dir);
        return -1;
    }

    copy = strdup(expr);
    for (cond = strtok_r(copy, ",", &save1); cond != NULL; cond = strtok_r(NULL, ",", &save1)) {
        /* a condition holds if one of its '|' alternatives holds */
        held   = 0;
        foff   = 0;
        failed[0] = '\0';
        for (alt = strtok_r(cond, "|", &save2); (alt != NULL) && !held;
             alt = strtok_r(NULL, "|", &save2)) {
            while (*alt == ' ') {
                ++alt;
            }
            r = eval_one(all, count, alt, &v);
            if (r < 0) {
                foff += snprintf(failed + foff, sizeof(failed) - foff, "%sbad condition '%s'",
                                 foff ? " | " : "", alt);
            } else if (r) {
                held = 1;
            } else {
                foff += snprintf(failed + foff, sizeof(failed) - foff, "%s%s (is %llu)",
                                 foff ? " | " : "", alt, (unsigned long long)v);
            }
            if (foff >= sizeof(failed)) {
                foff = sizeof(failed) - 1;
            }
        }
        if (!held && (off < why_len)) {
            off += snprintf(why + off, why_len - off, "%s%s", off ? "; " : "", failed);
        }
    }
    free(copy);
    return (why[0] == '\0') ? 0 : -1;
}
