#!/bin/bash
# A timed-out query and the CPU it keeps using: `strata serve` with a 300 ms query timeout,
# 20,000 rows, a non-equi self-join (400 million comparisons) over HTTP; prints when the
# timeout answer came and the server CPU over the 10 s after it.
# usage: timeout_cpu.sh <strata binary> <label>
B=$1; L=$2; D=$(mktemp -d); H=http://127.0.0.1:18090
ROWS=$D/kv.nd
python3 -c "
for i in range(20000): print('{\"k\": %d, \"v\": \"value-%08d\"}' % (i, (i*7919)%20000))" > $ROWS
"$B" serve --dir "$D/data" --http 127.0.0.1:18090 --flight 127.0.0.1:18091 --postgres '' --set query.timeout_ms=300 > $D/log 2>&1 &
pid=$!
for i in $(seq 1 50); do curl -s $H/v1/tables >/dev/null 2>&1 && break; sleep 0.2; done
curl -s -XPOST $H/v1/tables -d '{"name": "kv", "columns": [{"name": "k", "type": "int64", "nullable": false},{"name": "v", "type": "string"}], "primary_key": ["k"]}' >/dev/null
curl -s -XPOST -H 'content-type: application/x-ndjson' --data-binary @$ROWS $H/v1/tables/kv/rows >/dev/null
sleep 2
cpu() { awk '{print $14+$15}' /proc/$pid/stat; }
q="SELECT count(*) AS n FROM kv a JOIN kv b ON a.v < b.v"
s=$(date +%s%N); r=$(curl -s -XPOST -H 'content-type: text/plain' --data "$q" $H/sql); e=$(date +%s%N)
c0=$(cpu); sleep 10; c1=$(cpu)
echo "$L: answer after $(( (e-s)/1000000 )) ms: $r; CPU over the 10 s after the answer: $(( (c1-c0)*10 )) ms"
kill $pid; wait $pid 2>/dev/null; rm -rf $D
