# Probe for docs/buffer.md, "The page file's chunks": 10,500 16 KiB pages written buffered (a pwrite each,
# posix_fadvise(DONTNEED) every 64) or with O_DIRECT (one 1 MiB pwrite per 64), then fdatasync; prints wall
# time and CPU. Usage: python3 page-file-odirect-probe.py buffered|direct
import os, sys, time, mmap, resource
mode = sys.argv[1]; ps = 16384; n = 10500; run = 64; path = '/tmp/odtest.dat'
try: os.unlink(path)
except FileNotFoundError: pass
fd = os.open(path, os.O_RDWR | os.O_CREAT | (os.O_DIRECT if mode == 'direct' else 0), 0o644)
buf = mmap.mmap(-1, ps * run); buf.write(os.urandom(ps * run))
t0 = time.time(); r0 = resource.getrusage(resource.RUSAGE_SELF)
for i in range(0, n, run):
    if mode == 'direct':
        os.pwrite(fd, buf, i * ps)
    else:
        for j in range(run):
            os.pwrite(fd, buf[j*ps:(j+1)*ps], (i + j) * ps)
        os.posix_fadvise(fd, i * ps, run * ps, os.POSIX_FADV_DONTNEED)
t1 = time.time(); os.fdatasync(fd); t2 = time.time(); r1 = resource.getrusage(resource.RUSAGE_SELF)
print(f"{mode}: writes {t1-t0:.3f}s sync {t2-t1:.3f}s total {t2-t0:.3f}s cpu user {r1.ru_utime-r0.ru_utime:.3f} sys {r1.ru_stime-r0.ru_stime:.3f}")
os.close(fd); os.unlink(path)
