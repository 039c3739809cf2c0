"""Scale-out beyond one `ocrcli convert` process.

`convert --shard K/N` already splits a run across machines with nothing but the CLI (see
docs/scale-out.md). This package is for engines that schedule the work themselves: they map
the same render, decode and write steps as `convert`, so the outputs are the same files.

- `page_decoder`: rendered pages -> page records, through one model and engine (a worker).
- `ledger`: the driver's bookkeeping of a run (what is left, documents finished, summary).
- `ray`: Ray Data stages and the `ocrcli ray-convert` run (optional extra: `ocrcli[ray]`).
"""
