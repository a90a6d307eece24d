from mooncake.store import MooncakeDistributedStore

# A dummy client owns no segment: a mooncake_client daemon on this host
# (mooncake_client --port=50052 ...) holds the memory and does every call
# on its behalf, through memory the two processes share.

# 1. Create store instance
store = MooncakeDistributedStore()

# 2. Initialize with dummy client
rc = store.setup_dummy(
    1024*1024*256,         # 256MB memory pool (zero-copy buffers, shared with mooncake_client)
    1024*1024*64,          # 64MB local buffer (staging for put/get, shared too)
    "localhost:50052"      # The mooncake_client daemon (its --port)
)
if rc != 0:
    raise SystemExit(f"setup_dummy failed ({rc}): is mooncake_client running with --port=50052?")

# 3. Store data (the daemon writes it into the pool)
rc = store.put("dummy_hello_key", b"Hello from a dummy client!")
if rc != 0:
    raise SystemExit(f"put failed ({rc})")

# 4. Retrieve data
data = store.get("dummy_hello_key")
if data != b"Hello from a dummy client!":
    raise SystemExit(f"get returned {data!r}")
print(data.decode())  # Output: Hello from a dummy client!

# 5. Clean up
store.close()
