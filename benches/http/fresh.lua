-- A unique Idempotency-Key per request: PREFIX-THREAD-COUNTER, where PREFIX is
-- the script's first argument (run.sh passes target+round, so no key repeats
-- across runs against the same server) and THREAD numbers wrk's threads from 1.
-- The body carries the key as its slot_id, so the appointments service books a
-- new slot each time; the bare and layered routes get the same bytes.
--   wrk -s benches/http/fresh.lua URL -- PREFIX
local threads = 0
function setup(thread)
  threads = threads + 1
  thread:set("tid", threads)
end
function init(args)
  prefix = args[1] or "fresh"
  counter = 0
end
function request()
  counter = counter + 1
  local key = string.format("%s-%d-%d", prefix, tid or 0, counter)
  local body = string.format('{"customer_id":"bench","slot_id":"%s"}', key)
  return wrk.format("POST", nil, {
    ["Content-Type"] = "application/json",
    ["Authorization"] = "Bearer bench",
    ["Idempotency-Key"] = key,
  }, body)
end
