"""graphserve's /metrics read back: the Prometheus text format's samples, the series of one model,
and what the server did between two scrapes."""
import re
import urllib.request

# One sample line: name{labels} value. Comments (# HELP, # TYPE) and timestamps do not occur.
LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)")
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def fetch(url, timeout_s=10):
    """The text a /metrics URL answers."""
    with urllib.request.urlopen(url, timeout=timeout_s) as answer:
        return answer.read().decode()


def samples(text):
    """Every sample of an exposition as (name, {label: value}, value); lines that are no sample, or
    whose value is no number, are skipped."""
    found = []
    for line in text.splitlines():
        match = LINE.match(line)
        if not match or line.startswith("#"):
            continue
        try:
            value = float(match.group(3))
        except ValueError:
            continue
        found.append((match.group(1), dict(LABEL.findall(match.group(2) or "")), value))
    return found


def values(found, name, **match):
    """The values, among `found` (samples()'s list), of `name`'s series whose labels include every
    one of `match`."""
    wanted = set(match.items())
    return [value for sample, labels, value in found if sample == name and wanted <= set(labels.items())]


def parse_metrics(text, model):
    """{(name, frozenset(labels without model)): value} for the series of `model`."""
    series = {}
    for name, labels, value in samples(text):
        if labels.pop("model", None) == model:
            series[(name, frozenset(labels.items()))] = value
    return series


# The key Server.scrape files the statistics' summed batch compute_infer seconds under.
MEASURED_INFER_KEY = ("stats:batch_compute_infer_seconds", frozenset())


def total(series, name, **match):
    """Sum of `name`'s series whose labels include `match`."""
    wanted = set(match.items())
    return sum(v for (n, labels), v in series.items() if n == name and wanted <= labels)


def by_label(series, name, label):
    out = {}
    for (n, labels), v in series.items():
        if n == name:
            key = dict(labels).get(label)
            out[key] = out.get(key, 0.0) + v
    return out


def metric_delta(before, after, replay_us):
    """What the server did between two scrapes: padding, replays against eager runs, mean queue and
    compute time per request, and the time the device spent replaying (bucket replay times from
    the ceiling run times the replays of each bucket)."""
    (t0, m0), (t1, m1) = before, after

    def d(name, **match):
        return total(m1, name, **match) - total(m0, name, **match)

    real = d("graphserve_real_elements_total")
    padded = d("graphserve_padded_elements_total")
    batches = d("graphserve_batches_total")
    replays = d("graphserve_graph_replays_total")
    eager = d("graphserve_eager_executions_total")
    ok = d("graphserve_requests_total", code="success")
    r0 = by_label(m0, "graphserve_graph_replays_total", "bucket")
    r1 = by_label(m1, "graphserve_graph_replays_total", "bucket")
    measured = MEASURED_INFER_KEY in m0 and MEASURED_INFER_KEY in m1
    infer_s = m1[MEASURED_INFER_KEY] - m0[MEASURED_INFER_KEY] if measured else None
    replay_s = None
    if replay_us is not None:
        replay_s = sum((r1[b] - r0.get(b, 0.0)) * replay_us.get(b, 0.0) for b in r1) / 1e6
    d0 = by_label(m0, "graphserve_graph_replays_total", "device")
    d1 = by_label(m1, "graphserve_graph_replays_total", "device")
    b0 = by_label(m0, "graphserve_batches_total", "device")
    b1 = by_label(m1, "graphserve_batches_total", "device")
    e0 = by_label(m0, "graphserve_eager_executions_total", "reason")
    e1 = by_label(m1, "graphserve_eager_executions_total", "reason")

    def mean_ms(histogram):
        count = d(histogram + "_count")
        return 1000.0 * d(histogram + "_sum") / count if count > 0 else None

    return {
        "window_s": t1 - t0,
        "requests_ok": ok,
        "batches": batches,
        "rows_per_batch": d("graphserve_batch_rows_total") / batches if batches > 0 else None,
        "real_elements": real,
        "padded_elements": padded,
        "padding_ratio": padded / real if real > 0 else None,
        "graph_replays": replays,
        "eager_runs": eager,
        "eager_by_reason": {k: v - e0.get(k, 0.0) for k, v in e1.items() if v - e0.get(k, 0.0) > 0},
        # Several devices (--instance-devices): how the replays spread over them.
        "graph_replays_by_device": {k: v - d0.get(k, 0.0) for k, v in d1.items()},
        "batches_by_device": {k: v - b0.get(k, 0.0) for k, v in b1.items()},
        "replay_share": replays / batches if batches > 0 else None,
        "server_latency_ms": mean_ms("graphserve_request_duration_seconds"),
        "queue_ms": mean_ms("graphserve_queue_duration_seconds"),
        "compute_ms": mean_ms("graphserve_compute_duration_seconds"),
        "replay_busy_s": replay_s,
        "replay_busy_share": replay_s / (t1 - t0) if replay_s is not None and t1 > t0 else None,
        # The same from each batch's own measured compute time (summed over instances, so two
        # instances replaying at once count twice): about the estimate, the device idled between
        # batches; above it, towards 100%, the replays ran slower than at capture.
        "infer_measured_s": infer_s,
        "infer_measured_share": infer_s / (t1 - t0) if infer_s is not None and t1 > t0 else None,
    }
