/* SPDX-License-Identifier: Apache-2.0 */
/**
 * @file mooncake.h
 * @brief Umbrella header of libmooncake.
 */
#ifndef MOONCAKE_MOONCAKE_H
#define MOONCAKE_MOONCAKE_H

#include <mooncake/visibility.h>
#include <mooncake/status.h>
#include <mooncake/config.h>
#include <mooncake/transfer.h>
#include <mooncake/store.h>
#include <mooncake/tensor.h>
#include <mooncake/fastcopy.h>
#include <mooncake/codec.h>

#ifdef __cplusplus
extern "C" {
#endif

/** @brief Runtime library version, "MAJOR.MINOR.PATCH". @since 0.1 */
MC_API const char *mc_version_string(void);

/** @brief Set the log threshold (0 error .. 4 trace); MC_LOG_LEVEL sets it at load. @since 0.1 */
MC_API void mc_log_set_level(int level);

#ifdef __cplusplus
}
#endif
#endif /* MOONCAKE_MOONCAKE_H */
