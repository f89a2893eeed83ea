# Probe for docs/buffer.md, "The page file's chunks": 10,500 buffered 16 KiB pwrites to consecutive blocks
# (stride 1) or every other block (stride 2), with posix_fadvise(DONTNEED) every 64 (fadv) or not (none),
# then fdatasync. Usage: python3 page-file-layout-probe.py x STRIDE fadv|none
import os, sys, time, resource
mode, stride, adv = sys.argv[1], int(sys.argv[2]), sys.argv[3]
ps = 16384; n = 10500; path = '/tmp/wbtest.dat'
try: os.unlink(path)
except FileNotFoundError: pass
fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
buf = os.urandom(ps)
t0 = time.time(); r0 = resource.getrusage(resource.RUSAGE_SELF)
run_start = 0
for i in range(n):
    os.pwrite(fd, buf, i * stride * ps)
    if adv != 'none' and (i + 1) % 64 == 0:
        s = run_start * stride * ps; e = (i + 1) * stride * ps
        if adv == 'fadv': os.posix_fadvise(fd, s, e - s, os.POSIX_FADV_DONTNEED)
        elif adv == 'sfr': os.sync_file_range(fd, s, e - s, os.SYNC_FILE_RANGE_WRITE) if hasattr(os,'sync_file_range') else None
        run_start = i + 1
t1 = time.time()
os.fdatasync(fd)
t2 = time.time(); r1 = resource.getrusage(resource.RUSAGE_SELF)
print(f"stride={stride} adv={adv}: writes {t1-t0:.3f}s sync {t2-t1:.3f}s total {t2-t0:.3f}s  MB/s {n*ps/1e6/(t2-t0):.0f} cpu user {r1.ru_utime-r0.ru_utime:.3f} sys {r1.ru_stime-r0.ru_stime:.3f}")
os.close(fd); os.unlink(path)
