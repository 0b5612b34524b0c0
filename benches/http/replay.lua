-- One fixed Idempotency-Key and body (run.sh sends its first request before the
-- measurement, so every request here is a replay).
--   wrk -s benches/http/replay.lua URL
wrk.method = "POST"
wrk.body = '{"customer_id":"bench","slot_id":"replay-slot-1"}'
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer bench"
wrk.headers["Idempotency-Key"] = "bench-replay-1"
