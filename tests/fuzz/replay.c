/* replay.c -- runs a fuzz harness over its committed corpus without
 * libFuzzer, so every `make check` (plain and sanitizer builds, gcc)
 * replays the seeds and every input that once crashed.  Arguments: files or
 * directories; none: the harness's corpus (FUZZ_CORPUS, set at build). */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int replay_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    uint8_t *buf;
    long len;

    if (f == NULL || fseek(f, 0, SEEK_END) != 0 || (len = ftell(f)) < 0 ||
        fseek(f, 0, SEEK_SET) != 0) {
        fprintf(stderr, "replay: cannot read %s\n", path);
        if (f)
            fclose(f);
        return -1;
    }
    buf = malloc((size_t)len + 1);
    if (buf == NULL || fread(buf, 1, (size_t)len, f) != (size_t)len) {
        fprintf(stderr, "replay: cannot read %s\n", path);
        free(buf);
        fclose(f);
        return -1;
    }
    fclose(f);
    LLVMFuzzerTestOneInput(buf, (size_t)len);
    free(buf);
    return 0;
}

static int replay_path(const char *path, int *count_p)
{
    struct stat sb;
    struct dirent *e;
    DIR *d;
    int rc = 0;

    if (stat(path, &sb) != 0) {
        fprintf(stderr, "replay: no %s\n", path);
        return -1;
    }
    if (!S_ISDIR(sb.st_mode)) {
        (*count_p)++;
        return replay_file(path);
    }
    if ((d = opendir(path)) == NULL)
        return -1;
    while ((e = readdir(d)) != NULL) {
        char full[4096];
        if (e->d_name[0] == '.')
            continue;
        snprintf(full, sizeof(full), "%s/%s", path, e->d_name);
        if (replay_path(full, count_p) != 0)
            rc = -1;
    }
    closedir(d);
    return rc;
}

int main(int argc, char **argv)
{
    int count = 0, rc = 0;

    LLVMFuzzerInitialize(&argc, &argv);
    if (argc < 2)
        rc = replay_path(FUZZ_CORPUS, &count);
    for (int i = 1; i < argc; i++)
        if (replay_path(argv[i], &count) != 0)
            rc = -1;
    printf("replayed %d inputs%s\n", count, rc ? " (some could not be read)" : "");
    return rc || count == 0 ? 1 : 0;
}
