/*
 * hyperscope's SPANK plugin: `srun --auto-resume[=N]` (also sbatch/salloc).
 *
 * When a step started with --auto-resume fails (a task exits non-zero), the job is requeued so
 * that its batch script runs again and resumes from its last checkpoint, at most N times
 * (default 1). Slurm counts the restarts (SLURM_RESTART_COUNT); the tasks see HYPERSCOPE_AUTO_RESUME
 * (N) and HYPERSCOPE_ATTEMPT (1 for the first run). A node that dies is requeued by Slurm itself
 * (JobRequeue=1); hyperscope's agent replaces the node and stops a job past N attempts.
 *
 * plugstack.conf:  required /path/auto_resume.so scontrol=/usr/bin/scontrol conf=/etc/slurm/slurm.conf log=/shared/auto-resume.log
 *
 * Every decision is one line in the log file: "<unix time> job=<id> step=<id> task=<rank>
 * status=<exit> attempt=<k> of=<N> action=requeue|give-up|usage-error|cannot-requeue|skip", a
 * skip followed by " reason=already-requeued|cancelled".
 *
 * Not requeued: a usage error (exit status 2, as argparse and the shell's builtins exit, 64
 * EX_USAGE, 126 not executable, 127 not found) fails again on every attempt, so a requeue would
 * only spend the attempts ("usage-error"); and a step outside a batch job (srun straight from a
 * shell: only a batch job can be requeued) says so when it starts and when a task fails
 * ("cannot-requeue").
 *
 * Not requeued again: a job someone already requeued. hyperscope's agent requeues a hung job, and
 * Slurm one whose node died; either way slurmstepd then kills the other tasks (SIGTERM: status
 * 143), and each such death is a failed task here. For a task ended by a signal, the plugin asks slurmctld
 * (`scontrol show job`): once the job's Restarts has moved past this attempt, the attempt is over,
 * so it logs "action=skip reason=already-requeued" and runs no second requeue of it (nor logs a
 * give-up at the last attempt: the job goes on). Where slurmctld does not answer, it decides as
 * before.
 *
 * Never requeued: a job the operator cancelled (scancel ends its tasks by SIGTERM/SIGKILL, and
 * Slurm 22.05 accepts a requeue of the CANCELLED, COMPLETING job: the cancel would be overridden).
 * The same answer gives JobState=CANCELLED, or COMPLETING with Reason=None while the tasks are
 * killed (Slurm sets a Reason when a time limit or a dead node ends a job, TimeLimit or NodeDown:
 * those are left to decide as before, untested), so it logs "action=skip reason=cancelled".
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <slurm/spank.h>

SPANK_PLUGIN(hyperscope_auto_resume, 1);

static int auto_resume = 0;          /* N: requeues allowed; 0: option not given */
static char scontrol[512] = "scontrol";
static char conf[512] = "";
static char logpath[512] = "";

static int on_option(int val, const char *optarg, int remote)
{
    (void)val;
    (void)remote;
    if (optarg == NULL || *optarg == '\0') {
        auto_resume = 1;
        return 0;
    }
    char *end = NULL;
    long n = strtol(optarg, &end, 10);
    if (end == optarg || *end != '\0' || n < 0 || n > 100) {
        slurm_error("hyperscope: --auto-resume=%s: expected a number of retries from 0 to 100", optarg);
        return -1;
    }
    auto_resume = (int)n;
    return 0;
}

static struct spank_option option = {
    "auto-resume", "[N]",
    "hyperscope: when a task fails, requeue the job so it resumes from its last checkpoint, at most N times (default 1)",
    2, 0, on_option,
};

static void read_args(int ac, char **av)
{
    for (int i = 0; i < ac; i++) {
        if (strncmp(av[i], "scontrol=", 9) == 0)
            snprintf(scontrol, sizeof scontrol, "%s", av[i] + 9);
        else if (strncmp(av[i], "conf=", 5) == 0)
            snprintf(conf, sizeof conf, "%s", av[i] + 5);
        else if (strncmp(av[i], "log=", 4) == 0)
            snprintf(logpath, sizeof logpath, "%s", av[i] + 4);
        else
            slurm_error("hyperscope: unknown plugin argument '%s' (expected scontrol=, conf=, log=)", av[i]);
    }
}

int slurm_spank_init(spank_t sp, int ac, char **av)
{
    read_args(ac, av);
    /* sbatch and salloc ignore a static spank_options table: register the option explicitly. */
    return spank_option_register(sp, &option) == ESPANK_SUCCESS ? 0 : -1;
}

static int restart_count(spank_t sp)
{
    char value[32] = "";
    if (spank_getenv(sp, "SLURM_RESTART_COUNT", value, sizeof value) != ESPANK_SUCCESS)
        return 0;
    return atoi(value);
}

/* sbatch sets ENVIRONMENT=BATCH in the batch script, and srun passes it on to its tasks. */
static int in_batch_job(spank_t sp)
{
    char value[16] = "";
    if (spank_remote(sp)) {
        if (spank_getenv(sp, "ENVIRONMENT", value, sizeof value) != ESPANK_SUCCESS)
            return 0;
    } else {
        const char *env = getenv("ENVIRONMENT");
        snprintf(value, sizeof value, "%s", env ? env : "");
    }
    return strcmp(value, "BATCH") == 0;
}

static int usage_error(int code)
{
    return code == 2 || code == 64 || code == 126 || code == 127;
}

int slurm_spank_init_post_opt(spank_t sp, int ac, char **av)
{
    (void)ac;
    (void)av;
    if (auto_resume && spank_context() == S_CTX_LOCAL && !in_batch_job(sp))
        slurm_error("hyperscope: --auto-resume: this srun is not inside a batch job (sbatch), and only a "
                    "batch job can be requeued: a failing task will not be retried");
    if (!auto_resume || !spank_remote(sp))
        return 0;
    char value[32];
    snprintf(value, sizeof value, "%d", auto_resume);
    spank_setenv(sp, "HYPERSCOPE_AUTO_RESUME", value, 1);
    snprintf(value, sizeof value, "%d", restart_count(sp) + 1);
    spank_setenv(sp, "HYPERSCOPE_ATTEMPT", value, 1);
    return 0;
}

static void log_line(const char *line)
{
    if (!*logpath)
        return;
    int fd = open(logpath, O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd < 0)
        return;
    ssize_t ignored = write(fd, line, strlen(line));
    (void)ignored;
    close(fd);
}

/* One requeue per job attempt, whichever task or node fails first: an exclusive marker file. */
static int first_to_act(uint32_t job, int attempt)
{
    if (!*logpath)
        return 1;
    char marker[600];
    snprintf(marker, sizeof marker, "%s.job%u.attempt%d", logpath, job, attempt);
    int fd = open(marker, O_WRONLY | O_CREAT | O_EXCL, 0644);
    if (fd < 0)
        return errno != EEXIST;
    close(fd);
    return 1;
}

/* The value of " KEY=" in `scontrol show job -o`'s line into value ("" when it is not there). */
static void field(const char *line, const char *key, char *value, size_t size)
{
    *value = '\0';
    const char *at = strstr(line, key);
    if (!at)
        return;
    at += strlen(key);
    size_t n = strcspn(at, " \n");
    snprintf(value, size, "%.*s", (int)(n < size ? n : size - 1), at);
}

/* The job's Restarts as slurmctld has it now (`scontrol show job -o`: slurmctld counts a requeue
 * the moment it accepts it, before the job's tasks are killed), or -1 when it does not answer; and
 * whether slurmctld is ending it for a cancel (scancel): JobState=CANCELLED or, while its tasks
 * are being killed, COMPLETING with Reason=None (Slurm 22.05 shows only the COMPLETING flag). */
static int job_now(uint32_t job, int *cancelled)
{
    *cancelled = 0;
    int fds[2];
    if (pipe(fds) != 0)
        return -1;
    pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]);
        close(fds[1]);
        return -1;
    }
    if (pid == 0) {
        dup2(fds[1], STDOUT_FILENO);
        close(fds[0]);
        close(fds[1]);
        int null = open("/dev/null", O_WRONLY);
        if (null >= 0)
            dup2(null, STDERR_FILENO);
        if (*conf)
            setenv("SLURM_CONF", conf, 1);
        char id[32];
        snprintf(id, sizeof id, "%u", job);
        execlp(scontrol, scontrol, "show", "job", "-o", id, (char *)NULL);
        _exit(127);
    }
    close(fds[1]);
    char out[16384];
    size_t len = 0;
    for (;;) { /* read it all, keeping the start (Restarts= is near it), so scontrol never blocks */
        char scrap[4096];
        int room = len < sizeof out - 1;
        ssize_t got = read(fds[0], room ? out + len : scrap, room ? sizeof out - 1 - len : sizeof scrap);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            break;
        if (room)
            len += (size_t)got;
    }
    close(fds[0]);
    out[len] = '\0';
    int status = 0;
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
        return -1;
    char state[64], reason[64];
    field(out, " JobState=", state, sizeof state);
    field(out, " Reason=", reason, sizeof reason);
    *cancelled = strcmp(state, "CANCELLED") == 0 || (strcmp(state, "COMPLETING") == 0 && strcmp(reason, "None") == 0);
    const char *at = strstr(out, " Restarts=");
    return at ? atoi(at + 10) : -1;
}

/* Ended by a signal (or a shell's 128+SIGTERM/SIGKILL): how a requeue ends the tasks it kills. Only
 * then is slurmctld asked; a task that failed on its own is requeued without that extra round trip. */
static int killed(int status)
{
    return WIFSIGNALED(status) || (WIFEXITED(status) && (WEXITSTATUS(status) == 143 || WEXITSTATUS(status) == 137));
}

static int requeue(uint32_t job)
{
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        if (*conf)
            setenv("SLURM_CONF", conf, 1);
        char id[32];
        snprintf(id, sizeof id, "%u", job);
        execlp(scontrol, scontrol, "requeue", id, (char *)NULL);
        _exit(127);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

int slurm_spank_task_exit(spank_t sp, int ac, char **av)
{
    (void)ac;
    (void)av;
    int status = 0;
    uint32_t job = 0, step = 0, rank = 0;
    if (!auto_resume || spank_get_item(sp, S_TASK_EXIT_STATUS, &status) != ESPANK_SUCCESS)
        return 0;
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
        return 0;
    spank_get_item(sp, S_JOB_ID, &job);
    spank_get_item(sp, S_JOB_STEPID, &step);
    spank_get_item(sp, S_TASK_GLOBAL_ID, &rank);
    int attempt = restart_count(sp) + 1;
    if (!first_to_act(job, attempt))
        return 0;
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    const char *action = attempt <= auto_resume ? "requeue" : "give-up";
    const char *why = "";
    if (!in_batch_job(sp))
        action = "cannot-requeue";
    else if (WIFEXITED(status) && usage_error(code))
        action = "usage-error";
    else if (killed(status)) {
        int cancelled = 0;
        int restarts = job_now(job, &cancelled);
        if (restarts >= attempt) { /* a give-up too: the job goes on */
            action = "skip"; /* the agent's requeue, or Slurm's for a dead node, ended this task */
            why = " reason=already-requeued";
        } else if (restarts >= 0 && cancelled) { /* the operator's scancel: never overridden */
            action = "skip";
            why = " reason=cancelled";
        }
    }
    char line[300];
    snprintf(line, sizeof line, "%ld job=%u step=%u task=%u status=%d attempt=%d of=%d action=%s%s\n",
             (long)time(NULL), job, step, rank, code, attempt, auto_resume + 1, action, why);
    log_line(line);
    if (strcmp(action, "cannot-requeue") == 0)
        slurm_error("hyperscope: job %u task %u exited %d: not a batch job, so it cannot be requeued "
                    "(submit it with sbatch for --auto-resume)", job, rank, code);
    else if (strcmp(action, "usage-error") == 0)
        slurm_error("hyperscope: job %u task %u exited %d, a usage error: it fails the same way on every "
                    "attempt, so the job is not requeued", job, rank, code);
    else if (strcmp(why, " reason=cancelled") == 0)
        slurm_info("hyperscope: job %u task %u exited %d: the job was cancelled (scancel): not requeued",
                   job, rank, code);
    else if (*why)
        slurm_info("hyperscope: job %u task %u exited %d: the job was already requeued (by hyperscope's "
                   "agent or by Slurm): not requeued again", job, rank, code);
    else
        slurm_info("hyperscope: job %u step %u task %u exited %d: attempt %d of %d: %s", job, step, rank,
                   code, attempt, auto_resume + 1, action);
    if (strcmp(action, "requeue") == 0 && requeue(job) != 0)
        slurm_error("hyperscope: job %u: `%s requeue %u` failed", job, scontrol, job);
    return 0;
}
