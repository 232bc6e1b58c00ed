/* Which transport each lane of a UCP endpoint uses, parsed from ucp_ep_print_info(). */
#include "ucp_ext.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void copy_name(char *dst, const char *src, size_t len)
{
    if (len >= UCP_EXT_NAME_MAX) {
        len = UCP_EXT_NAME_MAX - 1;
    }
    memcpy(dst, src, len);
    dst[len] = '\0';
}

/* "tl/dev.path" (UCT_TL_RESOURCE_DESC_FMT plus ".%u" path index) -> tl, dev */
static int parse_resource(const char *p, size_t len, char *tl, char *dev)
{
    const char *slash = memchr(p, '/', len);
    const char *dot;

    if (slash == NULL) {
        return -1;
    }
    copy_name(tl, p, slash - p);
    /* the device name may itself contain dots (eth0.100): only the last one is the path index */
    for (dot = p + len - 1; (dot > slash) && (*dot != '.'); --dot) {
    }
    if (dot == slash) {
        dot = p + len;
    }
    copy_name(dev, slash + 1, dot - slash - 1);
    return 0;
}

static void trim_right(char *s)
{
    size_t n = strlen(s);
    while ((n > 0) && ((s[n - 1] == '\n') || (s[n - 1] == ' '))) {
        s[--n] = '\0';
    }
}

/* One "lane[N]: ..." line; returns 0 and fills lane, or -1 if the line is not a lane line. */
static int parse_lane_line(const char *line, ucp_ext_lane_t *lane)
{
    const char *p = strstr(line, "lane[");
    const char *res, *end, *roles, *aux;
    int consumed = 0, rsc;

    memset(lane, 0, sizeof(*lane));
    if ((p == NULL) || (sscanf(p, "lane[%d]: %n", &lane->index, &consumed) < 1) ||
        (consumed == 0)) {
        return -1;
    }
    p += consumed;

    if (strncmp(p, "cm ", 3) == 0) {
        lane->is_cm = 1;
        copy_name(lane->tl, p + 3, strcspn(p + 3, " \n"));
        return 0;
    }

    /* "%2d:tl/dev.path md[%d] ... -> md[%d]/cmpt/sysdev[%d] roles" */
    if (sscanf(p, "%d:%n", &rsc, &consumed) < 1) {
        return -1;
    }
    res = p + consumed;
    end = res + strcspn(res, " \n");
    if (parse_resource(res, end - res, lane->tl, lane->dev) != 0) {
        return -1;
    }

    roles = strstr(end, "sysdev[");
    if (roles != NULL) {
        roles = strchr(roles, ']');
    }
    if (roles != NULL) {
        snprintf(lane->roles, sizeof(lane->roles), "%s", roles + 1 + (roles[1] == ' '));
        trim_right(lane->roles);
    }

    /* "wireup{tl/dev}": the auxiliary transport that carries wireup messages */
    aux = strstr(end, "wireup{");
    if (aux != NULL) {
        char dev[UCP_EXT_NAME_MAX];
        aux += strlen("wireup{");
        parse_resource(aux, strcspn(aux, "}"), lane->aux_tl, dev);
    }
    return 0;
}

int ucp_ext_ep_lanes(ucp_ep_h ep, ucp_ext_lane_t *lanes, int max)
{
    char *text = NULL, *line, *save = NULL;
    size_t text_len = 0;
    ucp_ext_lane_t lane;
    FILE *stream;
    int count = 0;

    stream = open_memstream(&text, &text_len);
    if (stream == NULL) {
        return -1;
    }
    ucp_ep_print_info(ep, stream);
    fclose(stream);

    for (line = strtok_r(text, "\n", &save); line != NULL; line = strtok_r(NULL, "\n", &save)) {
        if (parse_lane_line(line, &lane) != 0) {
            continue;
        }
        if (count < max) {
            lanes[count] = lane;
        }
        ++count;
    }
    free(text);
    return count;
}

int ucp_ext_ep_lane_tls(ucp_ep_h ep, char names[][UCP_EXT_NAME_MAX], int max)
{
    ucp_ext_lane_t lanes[64];
    int n = ucp_ext_ep_lanes(ep, lanes, 64), i, count = 0;

    if (n < 0) {
        return -1;
    }
    for (i = 0; (i < n) && (i < 64); ++i) {
        if (lanes[i].is_cm) {
            continue;
        }
        if (count < max) {
            snprintf(names[count], UCP_EXT_NAME_MAX, "%s", lanes[i].tl);
        }
        ++count;
    }
    return count;
}

static void describe_lanes(const ucp_ext_lane_t *lanes, int n, char *buf, size_t len)
{
    size_t off = 0;
    int i;

    buf[0] = '\0';
    for (i = 0; (i < n) && (off < len); ++i) {
        off += snprintf(buf + off, len - off, "%s lane[%d] %s%s%s%s%s%s", (i == 0) ? "" : ";",
                        lanes[i].index, lanes[i].is_cm ? "cm " : "", lanes[i].tl,
                        lanes[i].is_cm ? "" : "/", lanes[i].dev,
                        lanes[i].aux_tl[0] ? " aux=" : "", lanes[i].aux_tl);
    }
}

/* tl is one of the comma-separated names in list */
static int in_list(const char *tl, const char *list)
{
    size_t n = strlen(tl);
    const char *p;

    for (p = list; (p = strstr(p, tl)) != NULL; p += n) {
        if (((p == list) || (p[-1] == ',')) && ((p[n] == '\0') || (p[n] == ','))) {
            return 1;
        }
    }
    return 0;
}

int ucp_ext_ep_check_tl(ucp_ep_h ep, const char *tl, char *why, size_t why_len)
{
    ucp_ext_lane_t lanes[64];
    char list[1024];
    int n = ucp_ext_ep_lanes(ep, lanes, 64), i, used = 0;

    if (n < 0) {
        snprintf(why, why_len, "could not capture ucp_ep_print_info() output");
        return -1;
    }
    if (n > 64) {
        n = 64;
    }
    describe_lanes(lanes, n, list, sizeof(list));
    for (i = 0; i < n; ++i) {
        if (lanes[i].is_cm || !strcmp(lanes[i].tl, "self")) {
            continue;
        }
        if (!in_list(lanes[i].tl, tl)) {
            snprintf(why, why_len, "lane[%d] uses %s/%s, not %s (lanes:%s)", lanes[i].index,
                     lanes[i].tl, lanes[i].dev, tl, list);
            return -1;
        }
        if (lanes[i].aux_tl[0] && !in_list(lanes[i].aux_tl, tl)) {
            snprintf(why, why_len, "lane[%d] wires up through %s, not %s (lanes:%s)",
                     lanes[i].index, lanes[i].aux_tl, tl, list);
            return -1;
        }
        ++used;
    }
    if (used == 0) {
        snprintf(why, why_len, "no lane uses %s (lanes:%s)", tl, n ? list : " none");
        return -1;
    }
    return 0;
}

void ucp_ext_ep_print_lanes(ucp_ep_h ep, FILE *stream)
{
    ucp_ext_lane_t lanes[64];
    int n = ucp_ext_ep_lanes(ep, lanes, 64), i;

    for (i = 0; (i < n) && (i < 64); ++i) {
        if (lanes[i].is_cm) {
            fprintf(stream, "lane[%d] cm %s\n", lanes[i].index, lanes[i].tl);
        } else {
            fprintf(stream, "lane[%d] %s/%s %s%s%s%s\n", lanes[i].index, lanes[i].tl,
                    lanes[i].dev, lanes[i].roles, lanes[i].aux_tl[0] ? " (aux " : "",
                    lanes[i].aux_tl, lanes[i].aux_tl[0] ? ")" : "");
        }
    }
}
