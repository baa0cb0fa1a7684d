#!/bin/sh
# The command behind samples/gates/nightly.toml. NIGHTLY_BREAK=shard makes the
# merge disagree with shard 2 (a wrong result the gate must fail).
set -e
alpha observe step smoke -- sh -c 'echo smoke ok'
alpha observe step bad-input -- sh -c '
    echo "refused: bad-input: the input is empty" >&2
    echo "{\"name\": \"bad-input\", \"status\": \"pass\", \"fields\": {\"exit_code\": 2, \"refusal\": \"bad-input\"}}" >> "$AOS_RECEIPTS"
    exit 2' || true
[ -n "${NIGHTLY_FULL:-}" ] || exit 0
for n in 1 2; do
    alpha observe step shard -- sh -c "
        d=\$(printf 'shard $n' | sha256sum | cut -d' ' -f1)
        echo \"{\\\"name\\\": \\\"shard\\\", \\\"status\\\": \\\"pass\\\", \\\"fields\\\": {\\\"shard\\\": $n, \\\"digest\\\": \\\"\$d\\\"}}\" >> \"\$AOS_RECEIPTS\""
done
for n in 1 2; do
    text="shard $n"
    [ "${NIGHTLY_BREAK:-}" = shard ] && [ "$n" = 2 ] && text="shard 2, merged wrongly"
    d=$(printf '%s' "$text" | sha256sum | cut -d' ' -f1)
    alpha observe receipt merged --status pass --field shard=$n --field digest="$d"
done
