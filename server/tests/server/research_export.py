"""Reads the Parquet and CSV tables of `l1gate replay` with DuckDB and polars
and checks them against the JSON-lines replay of the same blocks; and the
candle store's export against candles worked out here from the trades.

argv[1]: a JSON list of cases. A replay case {"view", "jsonl", "parquet",
"csv"}: for each,
the rows the view's table should hold are worked out here from the frames
(this file's own reading of the documented row rules), then each reader's
view of each file must agree on: the number of rows, the exact sum of the
size column, the exact sum of price x size, and the first and last rows'
block, price and size. Prints one line per case and file; exits non-zero on
the first disagreement.
"""

import json
import sys
from decimal import Decimal

import duckdb
import polars as pl

# The price and size columns compared for each view's table.
COLUMNS = {
    "l2book": ("px", "sz"),
    "bbo": ("bid_px", "bid_sz"),
    "l2diff": ("px", "sz"),
    "l4book": ("limit_px", "sz"),
    "l4updates": ("px", "sz"),
    "tpsl": ("limit_px", "sz"),
    "trades": ("px", "sz"),
    "fills": ("px", "sz"),
    "candles": ("close", "volume"),
    "mids": ("mid", None),
    "statuses": ("limit_px", "sz"),
}


def dec(value):
    return None if value is None else Decimal(str(value))


def levels(bids, asks):
    out = [(lvl["px"], lvl["sz"]) for lvl in bids + asks]
    return out or [(None, None)]


def diff_events(data):
    out = []
    groups = [data] + ([data["mirror"]] if "mirror" in data else [])
    for group in groups:
        for status in group["order_statuses"]:
            out.append((status["order"]["limitPx"], status["order"]["sz"]))
        for diff in group["book_diffs"]:
            raw = diff["raw_book_diff"]
            if raw == "remove":
                out.append((diff["px"], None))
            elif "new" in raw:
                out.append((diff["px"], raw["new"]["sz"]))
            else:
                out.append((diff["px"], raw["update"]["newSz"]))
    return out


def frame_rows(view, frame):
    """(px, sz) of each row the frame becomes, by the documented rules."""
    if view == "l2book":
        return levels(frame["bids"], frame["asks"])
    if view == "bbo":
        bid = frame.get("bid")
        return [(bid["px"], bid["sz"]) if bid else (None, None)]
    if view == "l2diff":
        out = []
        for diff in frame["diffs"]:
            out += levels(diff["bids"], diff["asks"])
        return out
    if view == "l4book":
        if "snapshot" in frame:
            snap = frame["snapshot"]
            return [(o["limit_px"], o["sz"]) for o in snap["bids"] + snap["asks"]]
        return diff_events(frame["diff"]["data"])
    if view in ("l4updates", "tpsl"):
        key = "px" if view == "l4updates" else "limit_px"
        return [(d[key], d["sz"]) for d in frame["diffs"]] or [(None, None)]
    if view == "trades":
        return [(t["px"], t["sz"]) for t in frame["trades"]]
    if view == "fills":
        return [(f["px"], f["sz"]) for f in frame["fills"]]
    if view == "candles":
        return [(frame["close"], frame["volume"])]
    if view == "mids":
        return [(mid, None) for _, mid in sorted(frame["mids"].items())] or [(None, None)]
    if view == "statuses":
        return [(s["order"]["limitPx"], s["order"]["sz"]) for s in frame["statuses"]]
    raise ValueError(view)


def block_of(frame):
    if "block_number" in frame:
        return frame["block_number"]
    # An l4book frame: {"snapshot": {...}} or {"diff": {...}}.
    return next(iter(frame.values()))["block_number"]


def expected(view, path):
    rows = []
    with open(path) as lines:
        for line in lines:
            frame = json.loads(line)
            block = block_of(frame)
            rows += [(block, dec(px), dec(sz)) for px, sz in frame_rows(view, frame)]
    return rows


def summary(rows):
    sizes = [sz for _, _, sz in rows if sz is not None]
    notional = [px * sz for _, px, sz in rows if px is not None and sz is not None]
    ends = (rows[0], rows[-1]) if rows else None
    return {
        "rows": len(rows),
        "sum_sz": sum(sizes, Decimal(0)),
        "notional": sum(notional, Decimal(0)),
        "ends": ends,
    }


def select(view):
    px, sz = COLUMNS[view]
    return f"block_number, {px}, {sz if sz else 'NULL'}"


def duckdb_rows(view, path, kind):
    con = duckdb.connect()
    con.execute("SET threads = 1")
    if kind == "parquet":
        source = f"read_parquet('{path}')"
    else:
        # Every column as text: the decimals compared exactly, as written.
        source = f"read_csv('{path}', header = true, all_varchar = true)"
    rows = con.execute(f"SELECT {select(view)} FROM {source}").fetchall()
    # DuckDB's own arithmetic too, over the typed Parquet columns.
    if kind == "parquet":
        px, sz = COLUMNS[view]
        count, total = con.execute(
            f"SELECT count(*), sum({sz if sz else 0}) FROM {source}"
        ).fetchone()
        assert count == len(rows), (count, len(rows))
        sizes = sum((dec(r[2]) for r in rows if r[2] is not None), Decimal(0))
        assert dec(total or 0) == sizes, (total, sizes)
    return [(int(b), dec(p), dec(s)) for b, p, s in rows]


def polars_rows(view, path, kind):
    px, sz = COLUMNS[view]
    if kind == "parquet":
        frame = pl.read_parquet(path)
        assert frame.schema["block_number"] == pl.UInt64, frame.schema
        assert isinstance(frame.schema[px], pl.Decimal), frame.schema
    else:
        frame = pl.read_csv(path, infer_schema=False)
    sizes = frame[sz].to_list() if sz else [None] * frame.height
    return [
        (int(b), dec(p), dec(s))
        for b, p, s in zip(frame["block_number"].to_list(), frame[px].to_list(), sizes)
    ]


def candle_buckets(trades_path, interval_ms):
    """open time -> the bucket's candle, from the trades' JSON lines."""
    buckets = {}
    with open(trades_path) as lines:
        for line in lines:
            for trade in json.loads(line)["trades"]:
                px, sz = Decimal(trade["px"]), Decimal(trade["sz"])
                start = trade["time"] - trade["time"] % interval_ms
                c = buckets.setdefault(start, {
                    "open": px, "high": px, "low": px, "volume": Decimal(0),
                    "notional": Decimal(0), "trades_count": 0,
                })
                c["high"], c["low"], c["close"] = max(c["high"], px), min(c["low"], px), px
                c["volume"] += sz
                c["notional"] += px * sz
                c["trades_count"] += 1
    return buckets


def check_candles(case):
    """A candle export case {"trades", "interval_ms", "parquet", "csv"}: every
    complete row is the bucket worked out from the trades, and no bucket
    between the first and the last complete row is missing."""
    want = candle_buckets(case["trades"], case["interval_ms"])
    parquet = duckdb.connect().execute(
        f"SELECT epoch_ms(open_time), open, high, low, close, volume, trades_count, vwap, "
        f"complete FROM read_parquet('{case['parquet']}') ORDER BY open_time"
    ).fetchall()
    csv = pl.read_csv(case["csv"], infer_schema=False)
    csv_rows = list(zip(*[csv[c].to_list() for c in (
        "open", "high", "low", "close", "volume", "trades_count", "vwap", "complete")]))
    if len(csv_rows) != len(parquet):
        raise SystemExit(f"{case['name']}: {len(csv_rows)} CSV rows, {len(parquet)} Parquet rows")
    complete = []
    for row, text in zip(parquet, csv_rows):
        start, o, h, l, c, v, n, vwap, whole = row
        if [dec(x) for x in (o, h, l, c, v, vwap)] + [n, whole] != [
                dec(x) for x in text[:5]] + [dec(text[6]), int(text[5]), text[7] == "true"]:
            raise SystemExit(f"{case['name']}: Parquet {row} and CSV {text} differ")
        if not whole:
            continue
        complete.append(start)
        bucket = want.get(start)
        got = {"open": dec(o), "high": dec(h), "low": dec(l), "close": dec(c),
               "volume": dec(v), "trades_count": n}
        if bucket is None or any(got[k] != bucket[k] for k in got):
            raise SystemExit(f"{case['name']}: bucket {start}: exported {got}, trades say {bucket}")
        exact = bucket["notional"] / bucket["volume"]
        # The VWAP is rounded to the decimals it is written with.
        places = -Decimal(text[6]).as_tuple().exponent
        if abs(dec(vwap) - exact) > Decimal(10) ** -places:
            raise SystemExit(f"{case['name']}: bucket {start}: VWAP {vwap}, trades say {exact}")
    if not parquet or len(complete) < case["min_complete"]:
        raise SystemExit(f"{case['name']}: only {len(complete)} complete candles")
    between = [t for t in want if complete and complete[0] <= t <= complete[-1]]
    if sorted(between) != complete:
        raise SystemExit(f"{case['name']}: complete buckets {complete}, trades say {sorted(between)}")
    print(f"{case['name']}: {len(complete)} complete candles equal the trades' in duckdb and polars")


def main():
    cases = json.loads(open(sys.argv[1]).read())
    for case in cases:
        if "trades" in case:
            check_candles(case)
            continue
        view = case["view"]
        want = summary(expected(view, case["jsonl"]))
        if want["rows"] == 0:
            raise SystemExit(f"{view}: the JSON-lines replay has no rows to compare")
        for kind in ("parquet", "csv"):
            for reader, read in (("duckdb", duckdb_rows), ("polars", polars_rows)):
                got = summary(read(view, case[kind], kind))
                if got != want:
                    raise SystemExit(
                        f"{case['name']} {view} {kind} via {reader}: {got} != {want}"
                    )
        print(f"{case['name']} {view}: {want['rows']} rows, sum sz {want['sum_sz']}, "
              f"notional {want['notional']}: parquet and csv agree in duckdb and polars")


main()
