import json,sys,statistics as st
rows=[json.loads(l) for l in open(sys.argv[1]) if l.startswith('{"binary"')]
keys=sorted({(r['op'],r.get('dist','-'),r['threads']) for r in rows})
print("op      dist      threads  arena_median  pool_median  pool/arena  per-round ratios")
for k in keys:
    sel=lambda b: [r for r in rows if (r['op'],r.get('dist','-'),r['threads'])==k and r['binary']==b]
    o=sel('old'); n=sel('new')
    rat=[]
    for rd in sorted({r['round'] for r in o}):
        a=[r['ops_per_sec'] for r in o if r['round']==rd]; b=[r['ops_per_sec'] for r in n if r['round']==rd]
        if a and b: rat.append(b[0]/a[0])
    mo=st.median(r['ops_per_sec'] for r in o); mn=st.median(r['ops_per_sec'] for r in n)
    print(f"{k[0]:7} {k[1]:9} {k[2]:7}  {mo/1e6:10.3f}M  {mn/1e6:10.3f}M  {mn/mo:9.3f}  {' '.join(f'{x:.2f}' for x in rat)} (median {st.median(rat):.3f})")
