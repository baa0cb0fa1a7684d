#!/bin/sh
# The command behind samples/gates/build-and-test.toml: build a package, test it.
set -e
alpha observe step build -- sh -c '
    mkdir -p dist
    printf "hello\n" > dist/hello.txt
    tar -cf dist/hello.tar -C dist hello.txt --mtime=@0 --owner=0 --group=0 --numeric-owner
    alpha observe artifact dist/hello.tar
    alpha observe receipt package --status pass --field path=dist/hello.tar \
        --field sha256="$(sha256sum dist/hello.tar | cut -d" " -f1)"
'
alpha observe step test -- sh -c '
    tar -xOf dist/hello.tar hello.txt | grep -q hello
    echo "{\"name\": \"tests\", \"status\": \"pass\", \"fields\": {\"passed\": 1, \"failed\": 0}}" >> "$AOS_RECEIPTS"
'
