#!/bin/sh
# A server for busybox nc -e (nc -ll -p PORT -e echo-headers.sh): it answers
# each request with the request's header lines as its body, so a test reads
# exactly what reached a sandbox's server.
h=""
while IFS= read -r line; do
  line=$(printf '%s' "$line" | tr -d '\r')
  [ -z "$line" ] && break
  h="$h$line
"
done
len=$(printf '%s' "$h" | wc -c)
printf 'HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s' "$len" "$h"
