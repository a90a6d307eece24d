/* SPDX-License-Identifier: Apache-2.0 */
/*
 * events/: the door of the KV cache event publisher (docs/events.md).
 * Other folders include this header and no other file of events/.
 *
 * Owns: the publisher and its triggers (kv_events.c: ZeroMQ PUB or etcd,
 * the sequence rule), the event records' encoding (kv_event_codec.c) and
 * the small MessagePack writer it uses (msgpack.c).  kv_event_codec.c and
 * msgpack.c use no master types, so the unit tests and the fuzzer build
 * them alone.
 *
 * May call: ../master.h (the records; is a replica in memory),
 * ../flags.h (the config check), ha/ (publish only while serving; the
 * etcd endpoints), libmooncake's common/ and coord/etcd.  Called by:
 * index/ (an event per stored or removed key), master.c (start, stop)
 * and admin/ (metrics).
 */
#ifndef MC_MASTER_EVENTS_H
#define MC_MASTER_EVENTS_H

#include "kv_events.h"
#include "msgpack.h"

#endif /* MC_MASTER_EVENTS_H */
