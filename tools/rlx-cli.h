/* rlx-cli.h — the subcommands of rlx-rank, the headless node and developer CLI
 *
 * Each subcommand is `int rlx_cmd_NAME (int argc, char **argv)` with argv[0]
 * the subcommand's name. Exit status: 0 success, 1 runtime failure (the
 * message says what went wrong), 2 usage error (a one-line message on stderr
 * naming the bad option or value and pointing at --help).
 */
#pragma once

#include <glib.h>
#include <json-glib/json-glib.h>

G_BEGIN_DECLS

#define RLX_EXIT_OK      0
#define RLX_EXIT_FAILURE 1
#define RLX_EXIT_USAGE   2

typedef int (*RlxCommandFunc) (int argc, char **argv);

typedef struct {
  const char     *name;
  RlxCommandFunc  func;
  const char     *summary;
} RlxCommand;

/* The table, in the order `rlx-rank --help` lists them; NULL-terminated. */
extern const RlxCommand rlx_commands[];

/* Parse with a GOptionContext; on a bad option print
 * "rlx-rank SUB: MESSAGE (see rlx-rank SUB --help)" and return FALSE. */
gboolean rlx_cli_parse (GOptionContext *ctx, const char *sub, int *argc, char ***argv);
/* Print "rlx-rank SUB: MESSAGE" to stderr and return @status. */
int      rlx_cli_fail  (const char *sub, int status, const char *fmt, ...) G_GNUC_PRINTF (3, 4);

/* Option values, each checked the same way in every subcommand. @text NULL
 * (the option was not given) is TRUE and leaves *@out as it is; a bad
 * value prints "rlx-rank SUB: OPT: 'TEXT' is not … (see rlx-rank SUB
 * --help)" and is FALSE. */
gboolean rlx_cli_uint     (const char *sub, const char *opt, const char *text, guint64 min,
                           guint64 max, guint64 *out);
/* A finite number above zero. */
gboolean rlx_cli_positive (const char *sub, const char *opt, const char *text, double *out);
/* FALSE, with "unexpected argument 'ARG'", when an argument is left after
 * the options. */
gboolean rlx_cli_no_extra_args (const char *sub, int argc, char **argv);
/* FALSE, with "OPT is required: WHAT", when @value is NULL. */
gboolean rlx_cli_require  (const char *sub, const char *opt, const char *value, const char *what);

/* Printing. @o as one JSON line on stdout, flushed. */
void        rlx_cli_print_json (JsonObject *o);
/* Bound the JSON lines' file: once standard output (a regular file) would
 * pass @max_bytes, FILE is renamed FILE.1 and a new FILE goes on (0: no
 * bound). FALSE when standard output is not a file. */
gboolean    rlx_cli_limit_stdout (guint64 max_bytes, GError **error);
/* A JSON number in @buf (locale-independent; null for NaN and Inf). */
const char *rlx_cli_json_num   (char buf[G_ASCII_DTOSTR_BUF_SIZE], double v);
/* @s as a JSON string, quotes included. */
char       *rlx_cli_json_str   (const char *s);

/* TRUE when @path exists and is not a regular file (/dev/null, /dev/stdout,
 * a FIFO). An --out like that must be written into with
 * rlx_cli_write_special(): the atomic write used for regular files renames a
 * temporary file over the target, which would replace the device node itself
 * (as root, /dev/null for the whole machine). */
gboolean rlx_cli_out_is_special (const char *path);
gboolean rlx_cli_write_special  (const char *path, const void *data, gsize len, GError **error);
/* All of @data to @fd (retrying on EINTR); the error says "writing NAME". */
gboolean rlx_cli_write_fd       (int fd, const char *name, const void *data, gsize len,
                                 GError **error);

int rlx_cmd_train   (int argc, char **argv);
int rlx_cmd_grads   (int argc, char **argv);
int rlx_cmd_bench   (int argc, char **argv);
int rlx_cmd_wire    (int argc, char **argv);
int rlx_cmd_devices (int argc, char **argv);
int rlx_cmd_join    (int argc, char **argv);
int rlx_cmd_export  (int argc, char **argv);
int rlx_cmd_signal  (int argc, char **argv);

/* Blank the key of every invite among @argv and the value of
 * --turn-password in place (what /proc/PID/cmdline shows); parse a copy
 * first. */
void rlx_cli_hide_secrets (int argc, char **argv);

G_END_DECLS
