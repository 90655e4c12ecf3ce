/* cli.h - the subcommands of `tide`. Each takes its own argv (argv[0] is the
 * subcommand's name) and returns the process exit status. */
#ifndef TIDE_CLI_H
#define TIDE_CLI_H

int tide__cli_run(int argc, char **argv);
int tide__cli_bench(int argc, char **argv);
int tide__cli_bench_worker(int argc, char **argv);
/* `tide status ADDR` (status.c) and `tide report FILE [--png OUT]` (report_cmd.c). */
int tide__cli_status(int argc, char **argv);
int tide__cli_report(int argc, char **argv);
int tide__cli_coordinator(int argc, char **argv); /* `tide coordinator` (coordinator.c) */

#endif
