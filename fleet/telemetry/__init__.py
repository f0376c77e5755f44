"""Live telemetry of the fleet: ingest, aggregation, rollups, websockets, Prometheus.

Path of a sample (see each module for details):

1. `ingest.publish_sample(node_id, sample, token=...)`: a node agent (inference/agent.py) or
   the simulator (fleet/planner/simulator.py) validates (`samples.normalize`), signs
   (HMAC-SHA256 keyed by the SHA-256 digest of the node token, which is what the nodes app
   stores) and XADDs it to the Redis stream `tandem:telemetry` (MAXLEN ~100k: raw samples are
   not kept). Counters in a sample are per-interval deltas (`samples.py` says who counts what).
2. `aggregator.Aggregator` (`manage.py run_aggregator`, a child of `manage.py up`, one per
   fleet): XREADs in batches, drops and counts forged/malformed samples, keeps a 5 s sliding
   window per node (`stats.Acc`), derives pipeline and fleet figures (`stats.derive`), and
   every 0.5 s sends ONE message per websocket group (`payloads.py`), writes the live snapshot
   to the Redis hash `tandem:live` (`snapshot.py`) and closes 10 s / 5 min rollup buckets into
   `models.Rollup` (retention in `models.RETENTION`, pruned every minute).
3. `consumers.py`: `ws/live/` (session users with the view role; per-pipeline/node
   subscriptions authorised once) and `ws/wall/` (signed wall links or viewers). Both refuse
   before accepting: 4401 unauthenticated, 4403 forbidden/revoked.
4. `metrics.py`: `/metrics` in Prometheus text format from the snapshot, vLLM-style names under
   `tandem:`. Access: `Authorization: Bearer $TANDEM_METRICS_TOKEN`, or an API key (`tdm_...`)
   of a user with the view role, or, only while TANDEM_METRICS_TOKEN is unset, plain requests
   from loopback.
5. `manage.py bench_telemetry --nodes 1000 [--seconds 20] [--json FILE]`: the whole path under
   load, measured at real websocket clients.
"""
