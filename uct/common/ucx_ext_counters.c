#include "ucx_ext_counters.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

void ucx_ext_counters_dump(const ucx_ext_counters_t *counters)
{
    const char *dir = getenv("UCX_EXT_COUNTERS_DIR");
    char path[4096], tmp[4200];
    unsigned i;
    FILE *f;

    if ((dir == NULL) || (*dir == '\0')) {
        return;
    }

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
