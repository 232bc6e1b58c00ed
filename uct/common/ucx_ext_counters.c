#ifdef HAVE_CONFIG_H
#  include "config.h"
#endif

#include "ucx_ext_counters.h"
#include "ucx_ext_compat.h"

#include <ucs/config/parser.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct ucx_ext_counters_config {
    char *dir;
} ucx_ext_counters_config_t;

static ucs_config_field_t ucx_ext_counters_config_table[] = {
    {"COUNTERS_DIR", "",
     "Directory where each process that loaded a ucx-ext transport writes its counters at exit,\n"
     "one file <transport>.<pid> of \"name value\" lines (tests use it to prove which transport\n"
     "carried the traffic). Empty: no file. \"%h\" in it stands for the host name (the\n"
     "directory is created): processes of several hosts, whose pids may be equal, then write\n"
     "to a directory per host.",
     offsetof(ucx_ext_counters_config_t, dir), UCS_CONFIG_TYPE_STRING},

    {NULL}
};

static ucs_config_global_list_entry_t ucx_ext_counters_config_entry = {
    .name   = "ucx-ext",
    .prefix = "EXT_",
    .table  = ucx_ext_counters_config_table,
    .size   = sizeof(ucx_ext_counters_config_t)
};

void ucx_ext_counters_config_init(void)
{
    ucs_config_global_list_entry_t *entry;
    ucx_ext_counters_config_t config;

    /* several transport libraries may be loaded: one registration per process */
    ucs_list_for_each(entry, &ucs_config_global_list, list) {
        if (!strcmp(entry->name, ucx_ext_counters_config_entry.name)) {
            return;
        }
    }
    ucs_list_add_tail(&ucs_config_global_list, &ucx_ext_counters_config_entry.list);
    /* parsing marks the variable as used, so UCX does not warn about it */
    if (ucx_ext_config_fill(&config, &ucx_ext_counters_config_entry, "UCX_", 1) == UCS_OK) {
        ucs_config_parser_release_opts(&config, ucx_ext_counters_config_table);
    }
}

/* dir with "%h" replaced by the host name, the directory created (one level, as the parent
 * is the run's); dir itself when it has no "%h". */
static const char *ucx_ext_counters_dir(const char *dir, char *buf, size_t len)
{
    const char *h = strstr(dir, "%h");
    char host[256];

    if (h == NULL) {
        return dir;
    }
    if (gethostname(host, sizeof(host)) != 0) {
        strcpy(host, "unknown");
    }
    host[sizeof(host) - 1] = '\0';
    snprintf(buf, len, "%.*s%s%s", (int)(h - dir), dir, host, h + 2);
    (void)mkdir(buf, 0777);
    return buf;
}

void ucx_ext_counters_dump(const ucx_ext_counters_t *counters)
{
    const char *dir = getenv("UCX_EXT_COUNTERS_DIR");
    char path[4096], tmp[4200], expanded[2048];
    unsigned i;
    FILE *f;

    if ((dir == NULL) || (*dir == '\0')) {
        return;
    }

    dir = ucx_ext_counters_dir(dir, expanded, sizeof(expanded));
    /* write-then-rename so a reader never sees half a file */
    snprintf(path, sizeof(path), "%s/%s.%d", dir, counters->tl, (int)getpid());
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    f = fopen(tmp, "w");
    if (f == NULL) {
        return;
    }
    for (i = 0; i < counters->count; ++i) {
        fprintf(f, "%s %llu\n", counters->names[i],
                (unsigned long long)counters->values[i]);
    }
    fclose(f);
    rename(tmp, path);
}
