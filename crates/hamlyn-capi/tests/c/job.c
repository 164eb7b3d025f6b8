/* One rank of a parallel job from C, run under `hamlyn run -n P` (or by hand with a
 * launcher's variables): rank and size, an all-gather of seeds (each rank's names a slot
 * of its own), and barriers: before barrier k every rank appends a line for round k to
 * DIR/rounds (DIR: the first argument, or $HAMLYN_JOB_DIR); after it, every rank must see all of round k's lines (nobody
 * left early). $HAMLYN_EXPECT_LAUNCHER names the launcher expected (default "hamlyn"). */
#include <fcntl.h>
#include <unistd.h>

#include "check.h"

#define ROUNDS 10

static size_t lines_in(const char *path) {
    FILE *f = fopen(path, "r");
    ASSERT(f != NULL);
    size_t n = 0;
    int c;
    while ((c = fgetc(f)) != EOF) {
        n += c == '\n';
    }
    fclose(f);
    return n;
}

int main(int argc, char **argv) {
    hamlyn_job *job;
    OK(hamlyn_job_init(&job));
    uint32_t rank, size, launcher;
    OK(hamlyn_job_rank(job, &rank));
    OK(hamlyn_job_size(job, &size));
    OK(hamlyn_job_launcher(job, &launcher));
    ASSERT(rank < size);
    const char *want = getenv("HAMLYN_EXPECT_LAUNCHER");
    uint32_t expected = HAMLYN_LAUNCHER_HAMLYN;
    if (want != NULL && strcmp(want, "slurm") == 0) {
        expected = HAMLYN_LAUNCHER_SLURM;
    }
    ASSERT(launcher == expected);

    /* An all-gather of seeds: each rank's names a slot of its own. */
    hamlyn_node *node;
    OK(hamlyn_node_connect_default(&node));
    hamlyn_area *area;
    hamlyn_meta_area *meta;
    hamlyn_slot *slot;
    hamlyn_ticket *ticket;
    hamlyn_slot_config cfg = {0};
    OK(hamlyn_area_new(node, 4096, &area));
    OK(hamlyn_meta_area_new(node, 1, &meta));
    OK(hamlyn_slot_new(node, area, meta, &cfg, &slot));
    OK(hamlyn_slot_ticket_all(slot, &ticket));
    char *mine = seed_of(ticket);
    OK(hamlyn_job_all_gather(job, mine));
    char **all = calloc(size, sizeof *all);
    ASSERT(all != NULL);
    for (uint32_t r = 0; r < size; r++) {
        size_t need = 0;
        EXPECT(hamlyn_job_gathered(job, r, NULL, 0, &need), HAMLYN_RESULT_BUFFER_TOO_SMALL);
        all[r] = malloc(need);
        ASSERT(all[r] != NULL);
        OK(hamlyn_job_gathered(job, r, all[r], need, NULL));
        hamlyn_ticket *t;
        OK(hamlyn_ticket_from_seed(all[r], &t));
        hamlyn_ticket_free(t);
        for (uint32_t q = 0; q < r; q++) {
            ASSERT(strcmp(all[q], all[r]) != 0);
        }
    }
    ASSERT(strcmp(all[rank], mine) == 0);
    EXPECT(hamlyn_job_gathered(job, size, NULL, 0, NULL), HAMLYN_RESULT_OUT_OF_RANGE);

    /* Barriers. */
    char log[4096];
    snprintf(log, sizeof log, "%s/rounds", argc > 1 ? argv[1] : env("HAMLYN_JOB_DIR"));
    for (uint32_t k = 0; k < ROUNDS; k++) {
        int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
        ASSERT(fd >= 0);
        char line[64];
        int n = snprintf(line, sizeof line, "%u %u\n", k, rank);
        ASSERT(write(fd, line, (size_t)n) == n);
        close(fd);
        OK(hamlyn_job_barrier(job));
        size_t seen = lines_in(log);
        if (seen < (size_t)size * (k + 1) || seen > (size_t)size * (k + 2)) {
            FAIL("rank %u after barrier %u: %zu lines, expected %u..%u", rank, k, seen, size * (k + 1),
                 size * (k + 2));
        }
    }
    OK(hamlyn_job_barrier(job));

    for (uint32_t r = 0; r < size; r++) {
        free(all[r]);
    }
    free(all);
    free(mine);
    hamlyn_ticket_free(ticket);
    hamlyn_slot_free(slot);
    hamlyn_meta_area_free(meta);
    hamlyn_area_free(area);
    hamlyn_node_free(node);
    hamlyn_job_free(job);
    printf("rank %u of %u: ok\n", rank, size);
    return 0;
}
