# Sourced by the communication benchmarks (comm_vs_ddp.sh, comm_two_nodes.sh): sets the
# allocator of both sides from --malloc=shipped|defaults|retain, in two arrays,
#   ours_malloc: flags for comm_benchmark, peer_malloc: environment for the Python peer.
# shipped: ours keeps freed host memory as //tools:train does (core/host_memory.h), the peer
#   with glibc's defaults, as PyTorch comes; defaults: both with glibc's defaults; retain: both
#   keep freed memory (the peer through MALLOC_*_ variables). defaults and retain are like for
#   like.
# Usage: malloc_settings "${malloc}" || exit 2
malloc_settings() {
  ours_malloc=() peer_malloc=()
  case "$1" in
    shipped) ;;
    defaults) ours_malloc=(--retain_host_memory=false) ;;
    retain) peer_malloc=(MALLOC_MMAP_THRESHOLD_=1073741824 MALLOC_TRIM_THRESHOLD_=1073741824) ;;
    *) echo "--malloc: shipped, defaults or retain, got $1" >&2; return 1 ;;
  esac
}
