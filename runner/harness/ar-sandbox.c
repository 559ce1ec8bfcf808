/*
 * ar-sandbox: run one step of an autoresearch experiment (a build, a benchmark invocation, the
 * checks) in its own PID and mount namespaces, as an unprivileged user, with a view of the file
 * system in which only the step's own tree, a private /tmp and a private HOME are writable and the
 * workspace (database, logs, job files, the other tree, the harness) is hidden.
 *
 *     ar-sandbox PLAN -- COMMAND [ARG...]
 *
 * The harness (harness.sh) compiles this file on the worker and writes PLAN, one directive a line,
 * fields separated by a tab, applied in order after the whole file system is made read-only:
 *
 *     userns                   new user namespace: the step is root inside, the caller outside
 *     user UID GID             switch to this user when the view is ready (the caller is root)
 *     nproc N                  RLIMIT_NPROC of the step (soft and hard), set before switching user:
 *                              a fork bomb stops at N processes of that user (all its steps
 *                              together), not when the machine runs out of process ids
 *     mindev                   replace /dev with null, zero, full, random, urandom, tty, shm
 *     tmpfs PATH MODE          an empty private tmpfs on PATH (hides what was there)
 *     bind SRC DST ro|rw       bind SRC (opened before anything is hidden) onto DST
 *     home PATH                create PATH for HOME, owned by the step's user
 *     chdir PATH               the step's working directory
 *
 * The command becomes PID 1 of the new PID namespace: when it exits, every process it left is
 * killed by the kernel, so nothing of one step survives into the next; it has an IPC namespace of
 * its own too, so no System V shared memory or message queue it leaves reaches a later step, and a
 * session keyring of its own (the user's keyrings emptied, under the uid method). This process
 * waits for it and exits with its status (128+signal when killed); SIGTERM, SIGINT and SIGHUP kill
 * the step.
 * All capabilities are dropped (bounding set, effective, permitted, inheritable, ambient) and
 * no_new_privs is set before the command runs. The step's oom_score_adj is 1000, inherited by all
 * it starts (/proc is read-only in the step; as root its floor is raised too): when memory runs
 * out, the kernel kills a process of a step before the runner, the harness or the job's shell.
 * Exit 125: the sandbox could not be set up (the reason on stderr); the harness then falls back or
 * refuses, as configured.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef SYS_mount_setattr
#define SYS_mount_setattr 442
#endif
#ifndef AT_RECURSIVE
#define AT_RECURSIVE 0x8000
#endif
#define AR_MOUNT_ATTR_RDONLY 0x00000001
#define AR_KEYCTL_JOIN_SESSION_KEYRING 1
#define AR_KEYCTL_CLEAR 7
#define AR_KEY_SPEC_USER_KEYRING -4
#define AR_KEY_SPEC_USER_SESSION_KEYRING -5
#ifndef PR_CAP_AMBIENT
#define PR_CAP_AMBIENT 47
#define PR_CAP_AMBIENT_CLEAR_ALL 4
#endif

struct ar_mount_attr {
    uint64_t attr_set, attr_clr, propagation, userns_fd;
};

#define MAX_LINES 4096
#define SETUP_FAILED 125

struct directive {
    char *word;
    char *arg[3];
    int fd; /* bind: the source, opened before anything is hidden */
};

static struct directive plan[MAX_LINES];
static int plan_len;
static int use_userns;
static uid_t step_uid;
static gid_t step_gid;
static int switch_user;
static rlim_t step_nproc;
static pid_t child_pid;

static void die(const char *fmt, ...) {
    va_list ap;
    int saved = errno;
    fputs("ar-sandbox: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    if (saved)
        fprintf(stderr, ": %s", strerror(saved));
    fputc('\n', stderr);
    _exit(SETUP_FAILED);
}

static void read_plan(const char *path) {
    FILE *f = fopen(path, "r");
    char line[8192];
    if (!f)
        die("cannot read the plan %s", path);
    while (fgets(line, sizeof line, f)) {
        size_t n = strlen(line);
        struct directive *d;
        char *field, *rest;
        int i = 0;
        if (n && line[n - 1] == '\n')
            line[--n] = 0;
        if (!n || line[0] == '#')
            continue;
        if (plan_len == MAX_LINES) {
            errno = 0;
            die("the plan has more than %d lines", MAX_LINES);
        }
        d = &plan[plan_len++];
        rest = strdup(line);
        d->word = strsep(&rest, "\t");
        while ((field = strsep(&rest, "\t")) && i < 3)
            d->arg[i++] = field;
        d->fd = -1;
        if (!strcmp(d->word, "userns"))
            use_userns = 1;
        if (!strcmp(d->word, "user") && d->arg[0] && d->arg[1]) {
            switch_user = 1;
            step_uid = (uid_t)strtoul(d->arg[0], NULL, 10);
            step_gid = (gid_t)strtoul(d->arg[1], NULL, 10);
        }
        if (!strcmp(d->word, "nproc") && d->arg[0])
            step_nproc = (rlim_t)strtoull(d->arg[0], NULL, 10);
    }
    fclose(f);
}

static void write_file(const char *path, const char *text) {
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0 || write(fd, text, strlen(text)) != (ssize_t)strlen(text))
        die("cannot write %s", path);
    close(fd);
}

/* MS_* flags that a remount must keep (a user namespace may not clear them on a locked mount). */
static unsigned long kept_flags(const char *path) {
    struct statvfs st;
    unsigned long flags = 0;
    if (statvfs(path, &st) != 0)
        return 0;
    if (st.f_flag & ST_NOSUID)
        flags |= MS_NOSUID;
    if (st.f_flag & ST_NODEV)
        flags |= MS_NODEV;
    if (st.f_flag & ST_NOEXEC)
        flags |= MS_NOEXEC;
    if (st.f_flag & ST_NOATIME)
        flags |= MS_NOATIME;
    if (st.f_flag & ST_NODIRATIME)
        flags |= MS_NODIRATIME;
    if (st.f_flag & ST_RELATIME)
        flags |= MS_RELATIME;
    return flags;
}

static void unescape(char *s) { /* mountinfo writes space, tab, newline and backslash as \ooo */
    char *out = s;
    while (*s) {
        if (s[0] == '\\' && s[1] >= '0' && s[1] <= '7' && s[2] && s[3]) {
            *out++ = (char)(((s[1] - '0') << 6) | ((s[2] - '0') << 3) | (s[3] - '0'));
            s += 4;
        } else {
            *out++ = *s++;
        }
    }
    *out = 0;
}

static void all_read_only(void) {
    struct ar_mount_attr attr = {AR_MOUNT_ATTR_RDONLY, 0, 0, 0};
    FILE *f;
    char line[8192];
    if (syscall(SYS_mount_setattr, AT_FDCWD, "/", AT_RECURSIVE, &attr, sizeof attr) == 0)
        return;
    if (errno != ENOSYS && errno != EINVAL)
        die("cannot make the file system read-only");
    /* Kernels before 5.12: one remount per mount. */
    f = fopen("/proc/self/mountinfo", "r");
    if (!f)
        die("cannot read /proc/self/mountinfo");
    while (fgets(line, sizeof line, f)) {
        char *p = line, *target = NULL;
        int i;
        for (i = 0; i < 5 && p; i++) {
            target = strsep(&p, " ");
        }
        if (!target)
            continue;
        unescape(target);
        if (mount(NULL, target, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | kept_flags(target), NULL) != 0 &&
            errno != EACCES && errno != ENOENT)
            die("cannot make %s read-only", target);
    }
    fclose(f);
}

static void make_parents(const char *path, mode_t mode) {
    char buf[4096];
    size_t i;
    if (strlen(path) >= sizeof buf) {
        errno = ENAMETOOLONG;
        die("%s", path);
    }
    strcpy(buf, path);
    for (i = 1; buf[i]; i++) {
        if (buf[i] != '/')
            continue;
        buf[i] = 0;
        if (mkdir(buf, mode) != 0 && errno != EEXIST)
            die("cannot create %s", buf);
        buf[i] = '/';
    }
}

static void do_bind(struct directive *d) {
    char source[64];
    struct stat st;
    const char *dst = d->arg[1];
    int ro = d->arg[2] && !strcmp(d->arg[2], "ro");
    if (fstat(d->fd, &st) != 0)
        die("cannot stat %s", d->arg[0]);
    if (access(dst, F_OK) != 0) {
        make_parents(dst, 0755);
        if (S_ISDIR(st.st_mode)) {
            if (mkdir(dst, 0755) != 0 && errno != EEXIST)
                die("cannot create %s", dst);
        } else {
            int fd = open(dst, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
            if (fd < 0)
                die("cannot create %s", dst);
            close(fd);
        }
    }
    snprintf(source, sizeof source, "/proc/self/fd/%d", d->fd);
    if (mount(source, dst, NULL, MS_BIND, NULL) != 0)
        die("cannot bind %s onto %s", d->arg[0], dst);
    if (mount(NULL, dst, NULL, MS_REMOUNT | MS_BIND | (ro ? MS_RDONLY : 0) | kept_flags(dst), NULL) != 0)
        die("cannot remount %s %s", dst, ro ? "read-only" : "writable");
}

static void do_tmpfs(const char *path, const char *mode) {
    char options[64];
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
        return; /* nothing to hide there */
    snprintf(options, sizeof options, "mode=%s", mode ? mode : "0755");
    if (mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV, options) != 0)
        die("cannot mount a tmpfs on %s", path);
}

static void min_dev(void) {
    static const char *nodes[] = {"null", "zero", "full", "random", "urandom", "tty"};
    int fds[6];
    size_t i;
    char path[64];
    for (i = 0; i < 6; i++) {
        snprintf(path, sizeof path, "/dev/%s", nodes[i]);
        fds[i] = open(path, O_PATH | O_CLOEXEC);
    }
    if (mount("tmpfs", "/dev", "tmpfs", MS_NOSUID | MS_NOEXEC, "mode=0755") != 0)
        die("cannot mount a tmpfs on /dev");
    for (i = 0; i < 6; i++) {
        char source[64];
        int fd;
        if (fds[i] < 0)
            continue;
        snprintf(path, sizeof path, "/dev/%s", nodes[i]);
        fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0666);
        if (fd >= 0)
            close(fd);
        snprintf(source, sizeof source, "/proc/self/fd/%d", fds[i]);
        if (mount(source, path, NULL, MS_BIND, NULL) != 0)
            die("cannot bind %s", path);
        close(fds[i]);
    }
    if (mkdir("/dev/shm", 01777) != 0 || mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777"))
        die("cannot mount /dev/shm");
    if (symlink("/proc/self/fd", "/dev/fd") || symlink("/proc/self/fd/0", "/dev/stdin") ||
        symlink("/proc/self/fd/1", "/dev/stdout") || symlink("/proc/self/fd/2", "/dev/stderr"))
        die("cannot link /dev/fd");
}

static void drop_privileges(void) {
    struct __user_cap_header_struct header = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct data[2];
    int cap;
    for (cap = 0; cap <= 63; cap++) {
        if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 && errno != EINVAL)
            die("cannot drop capability %d from the bounding set", cap);
    }
    if (step_nproc) {
        /* Before the switch: the kernel checks the new user's count against it (setresuid, execve). */
        struct rlimit limit = {step_nproc, step_nproc};
        if (setrlimit(RLIMIT_NPROC, &limit) != 0)
            die("cannot limit the step to %llu processes", (unsigned long long)step_nproc);
    }
    if (switch_user) {
        if (setgroups(0, NULL) != 0 || setresgid(step_gid, step_gid, step_gid) != 0 ||
            setresuid(step_uid, step_uid, step_uid) != 0)
            die("cannot switch to uid %u", (unsigned)step_uid);
    }
    memset(data, 0, sizeof data);
    if (syscall(SYS_capset, &header, data) != 0)
        die("cannot drop capabilities");
    prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
        die("cannot set no_new_privs");
}

/* The OOM killer's first choice: any process of the step scores above every process outside it.
 * Raising needs no privilege; as root (the uid method) the floor is raised too, so that not even a
 * writable /proc would let the step lower it. Best effort: a kernel without it still runs the step. */
static void first_to_go(void) {
    int fd = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
    if (fd >= 0) {
        if (write(fd, "1000", 4) != 4) {
            /* nothing more to do: the step runs, only less protected against a memory hog */
        }
        close(fd);
    }
}

/* Kernel keyrings are no file: no mount hides them. The step gets a session keyring of its own
 * (joined before the user switch, so that no quota of the step's user can refuse it): it no longer
 * holds the caller's, whose keys it could read and add to. Under the uid method every step is the
 * same user, whose user keyrings outlive a step (a key one step adds, the next would find): they
 * are emptied before the command runs. A kernel without keyrings has nothing to hide; a failure is
 * said in the step's output, and the step runs (refusing it would let a step that exhausts a key
 * quota turn the sandbox off for the steps after it). */
static void own_session_keyring(void) {
    if (syscall(SYS_keyctl, AR_KEYCTL_JOIN_SESSION_KEYRING, NULL) < 0 && errno != ENOSYS)
        fprintf(stderr, "ar-sandbox: warning: the step keeps the caller's session keyring: %s\n",
                strerror(errno));
}

static void empty_user_keyrings(void) {
    syscall(SYS_keyctl, AR_KEYCTL_CLEAR, AR_KEY_SPEC_USER_KEYRING);
    syscall(SYS_keyctl, AR_KEYCTL_CLEAR, AR_KEY_SPEC_USER_SESSION_KEYRING);
}

static void close_other_fds(int keep) {
    int fd;
    for (fd = 3; fd < 1024; fd++)
        if (fd != keep)
            close(fd);
    if (syscall(SYS_close_range, 1024, ~0U, 0) != 0 && errno != ENOSYS && errno != EINVAL)
        die("cannot close inherited descriptors");
}

static int child_main(int sync_fd, char **argv) {
    char go;
    int i;
    const char *dir = NULL, *home = NULL;
    struct pollfd pfd;
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (read(sync_fd, &go, 1) != 1)
        _exit(SETUP_FAILED); /* the parent is gone */
    first_to_go(); /* while /proc is still the caller's, writable */
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0)
        die("cannot make the mounts private");
    if (mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) != 0)
        die("cannot mount /proc for the new PID namespace");
    for (i = 0; i < plan_len; i++) {
        struct directive *d = &plan[i];
        if (!strcmp(d->word, "bind")) {
            if (!d->arg[0] || !d->arg[1])
                die("bind needs a source and a target");
            d->fd = open(d->arg[0], O_PATH | O_CLOEXEC);
            if (d->fd < 0)
                die("cannot open %s", d->arg[0]);
        }
    }
    all_read_only();
    for (i = 0; i < plan_len; i++) {
        struct directive *d = &plan[i];
        if (!strcmp(d->word, "mindev"))
            min_dev();
        else if (!strcmp(d->word, "tmpfs"))
            do_tmpfs(d->arg[0], d->arg[1]);
        else if (!strcmp(d->word, "bind"))
            do_bind(d);
        else if (!strcmp(d->word, "home"))
            home = d->arg[0];
        else if (!strcmp(d->word, "chdir"))
            dir = d->arg[0];
    }
    for (i = 0; i < plan_len; i++)
        if (plan[i].fd >= 0)
            close(plan[i].fd);
    if (home) {
        make_parents(home, 0755);
        if (mkdir(home, 0700) != 0 && errno != EEXIST)
            die("cannot create %s", home);
        if (switch_user && chown(home, step_uid, step_gid) != 0)
            die("cannot give %s to uid %u", home, (unsigned)step_uid);
    }
    if (dir && chdir(dir) != 0)
        die("cannot enter %s", dir);
    close_other_fds(sync_fd);
    own_session_keyring();
    drop_privileges();
    if (switch_user)
        empty_user_keyrings();
    /* A change of credentials clears the parent-death signal: set it again, then make sure the
     * parent did not die in between (it holds the other end of the pipe open while it waits). */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    pfd.fd = sync_fd;
    pfd.events = POLLIN;
    if (poll(&pfd, 1, 0) > 0)
        _exit(SETUP_FAILED);
    close(sync_fd);
    execvp(argv[0], argv);
    die("cannot run %s", argv[0]);
    return SETUP_FAILED;
}

static void forward(int sig) {
    (void)sig;
    if (child_pid > 0)
        kill(child_pid, SIGKILL);
}

int main(int argc, char **argv) {
    int sync[2], status;
    unsigned long flags = CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC;
    char map[64], path[64];
    uid_t uid = geteuid();
    gid_t gid = getegid();
    struct sigaction sa;
    if (argc < 4 || strcmp(argv[2], "--")) {
        fprintf(stderr, "usage: ar-sandbox PLAN -- COMMAND [ARG...]\n");
        return SETUP_FAILED;
    }
    read_plan(argv[1]);
    if (use_userns)
        flags |= CLONE_NEWUSER;
    if (pipe2(sync, O_CLOEXEC) != 0)
        die("pipe");
    fflush(NULL);
    child_pid = (pid_t)syscall(SYS_clone, flags | SIGCHLD, 0, 0, 0, 0);
    if (child_pid < 0)
        die("cannot create the namespaces");
    if (child_pid == 0) {
        close(sync[1]);
        return child_main(sync[0], argv + 3);
    }
    close(sync[0]);
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = forward;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    if (use_userns) {
        /* Root inside is the caller outside (and nobody else): its own files, no one else's. */
        snprintf(path, sizeof path, "/proc/%d/setgroups", (int)child_pid);
        if (uid != 0)
            write_file(path, "deny");
        snprintf(path, sizeof path, "/proc/%d/uid_map", (int)child_pid);
        snprintf(map, sizeof map, "0 %u 1\n", (unsigned)uid);
        write_file(path, map);
        snprintf(path, sizeof path, "/proc/%d/gid_map", (int)child_pid);
        snprintf(map, sizeof map, "0 %u 1\n", (unsigned)gid);
        write_file(path, map);
    }
    if (write(sync[1], "g", 1) != 1)
        die("cannot start the step");
    while (waitpid(child_pid, &status, 0) < 0) {
        if (errno != EINTR)
            die("waitpid");
    }
    if (WIFEXITED(status))
        return WEXITSTATUS(status);
    return 128 + WTERMSIG(status);
}
