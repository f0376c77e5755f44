"""Live telemetry of the fleet: ingest, aggregation, rollups, websockets, Prometheus.

Path of a sample (see each module for details):

1. `ingest.publish_sample(node_id, sample, token=...)`: a node agent (inference/agent.py) or
   the simulator (fleet/planner/simulator.py; the bench's templated nodes, `templates.py`)
   validates (`samples.normalize`), signs (HMAC-SHA256 under a per-node key, see ingest.py) and
   XADDs it to the node's shard stream `tandem:telemetry:<node id % 16>` (one packed field).
   Counters in a sample are per-interval deltas (`samples.py` says who counts what).
2. `aggregator.Aggregator` (`manage.py run_aggregator`; TANDEM_AGGREGATORS of them under
   `manage.py up`): each owns some shards (`shards.py`: leases, a dead one's shards taken within
   5 s, pending entries replayed), reads them through a consumer group, drops and counts
   forged/malformed samples, keeps a 5 s sliding window per node (`accumulators.Acc`), and every
   0.5 s reports a partial; the leader merges them (`merge.py`) and sends ONE message per
   websocket group (`payloads.py`; the fleet page's as deltas, `feed.py`), writes the live
   snapshot to the Redis hash `tandem:live` (`snapshot.py`); node, pipeline and fleet rollups
   (10 s / 5 min, `models.Rollup`) are written once per bucket, the entries they cover acked
   after. Node state changes arrive as notices after commit (`notices.py`).
3. `consumers.py`: `ws/live/` (session users with the view role; per-pipeline/node
   subscriptions authorised once) and `ws/wall/` (signed wall links or viewers). Both refuse
   before accepting: 4401 unauthenticated, 4403 forbidden/revoked.
4. `metrics.py`: `/metrics` in Prometheus text format from the snapshot, vLLM-style names under
   `tandem:`. Access: `Authorization: Bearer $TANDEM_METRICS_TOKEN`, or an API key (`tdm_...`)
   of a user with the view role, or, only while TANDEM_METRICS_TOKEN is unset, plain requests
   from loopback.
5. `manage.py bench_telemetry --nodes 1000 [--seconds 20] [--aggregators N] [--json FILE]`:
   the whole path under load, measured at real websocket clients; `--scale-out`: what 1 and 2
   aggregators absorb.
"""
