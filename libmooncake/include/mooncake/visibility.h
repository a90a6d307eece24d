/* SPDX-License-Identifier: Apache-2.0 */
/**
 * @file visibility.h
 * @brief MC_API marks every exported symbol; the library is built with
 *        -fvisibility=hidden so nothing else escapes.
 */
#ifndef MOONCAKE_VISIBILITY_H
#define MOONCAKE_VISIBILITY_H

#if defined(__GNUC__) && defined(MC_BUILDING_LIBRARY)
#define MC_API __attribute__((visibility("default")))
#else
#define MC_API
#endif

#endif /* MOONCAKE_VISIBILITY_H */
