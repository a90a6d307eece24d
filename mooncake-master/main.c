/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mooncake_master: parse the flags, set up logging, run the master.
 *
 * Exit codes: 0 after --help, --version or a clean shutdown (SIGTERM or
 * SIGINT; SIGHUP does not stop it); 2 for a bad command line (or a feature
 * this build does not implement); 1 when the master cannot start (a port
 * that cannot be bound, a --log_dir that cannot be written, out of memory).
 *
 * Owns: the process: flags, logging, the master's run and the exit code.
 * May call: flags.h and master.h (mc_master_create/run/destroy) only.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "flags.h"
#include "master.h"

#define MC_EXIT_USAGE 2

int main(int argc, char **argv)
{
    mc_master_config_t cfg;
    mc_master_t *m = NULL;
    char err[512];
    int level;
    int rc;

    if (mc_master_config_init(&cfg) != MC_OK) {
        fprintf(stderr, "mooncake_master: out of memory\n");
        return 1;
    }
    if ((mc_master_flags_parse(&cfg, argc, argv, err, sizeof(err)) != MC_OK) ||
        (mc_master_config_check(&cfg, err, sizeof(err)) != MC_OK)) {
        fprintf(stderr, "mooncake_master: ERROR: %s\nTry 'mooncake_master --help'.\n", err);
        mc_master_config_cleanup(&cfg);
        return MC_EXIT_USAGE;
    }
    if (cfg.help) {
        mc_master_flags_print_help(stdout, "mooncake_master");
        mc_master_config_cleanup(&cfg);
        return 0;
    }
    if (cfg.version) {
        printf("mooncake_master %s\n", mc_version_string());
        mc_master_config_cleanup(&cfg);
        return 0;
    }

    /* --log_level, else $MC_LOG_LEVEL (read by the library at load), else
     * info: a daemon should say where it listens. */
    if (cfg.log_level[0] != '\0') {
        if (mc_log_parse_level(cfg.log_level, &level) == 0)
            mc_log_set_level(level);
    } else if (mc_log_parse_level(getenv("MC_LOG_LEVEL"), &level) != 0) {
        mc_log_set_level(MC_LOG_INFO);
    }
    mc_log_rate_per_s = (unsigned)MC_MIN(cfg.log_rate_limit, (int64_t)1000000);
    if ((cfg.log_dir[0] != '\0') && (mc_master_log_open(cfg.log_dir) != 0)) {
        fprintf(stderr, "mooncake_master: cannot open the log file in --log_dir=%s: %s\n",
                cfg.log_dir, strerror(errno));
        mc_master_config_cleanup(&cfg);
        return 1;
    }
    mc_master_flags_warn_unimplemented(&cfg);

    if (mc_master_create(&cfg, &m) != MC_OK) {
        fprintf(stderr, "mooncake_master: cannot start (see the log above)\n");
        mc_master_config_cleanup(&cfg);
        return 1;
    }
    rc = mc_master_run(m);
    mc_master_destroy(m);
    mc_info("mooncake_master stopped");
    mc_master_config_cleanup(&cfg);
    return rc;
}
