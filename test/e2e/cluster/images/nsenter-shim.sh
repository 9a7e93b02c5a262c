#!/bin/sh
# /usr/local/bin/nsenter in the local agnhost image, for e2e "hostexec" pods that run
# `nsenter --mount=/rootfs/proc/1/ns/mnt ...`. On this VM PID 1 holds capabilities
# (CAP_SYS_RESOURCE) that nothing we start has, so /proc/1/ns/* cannot be opened:
# "nsenter: can't open '/rootfs/proc/1/ns/mnt': Permission denied". kthreadd (PID 2)
# lives in the same mount namespace, so use it instead.
n=$#; i=0
while [ $i -lt $n ]; do
  a=$1; shift
  case "$a" in
    --mount=*/proc/1/ns/mnt) a="--mount=${a#--mount=}"; a="${a%/proc/1/ns/mnt}/proc/2/ns/mnt" ;;
  esac
  set -- "$@" "$a"; i=$((i+1))
done
exec /bin/busybox nsenter "$@"
