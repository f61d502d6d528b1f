import re,sys
# per TIMELINE group of 6 tasks (one writer batch): makespan of the tasks, busy sum, idle slot share, hot task start rank
for f in sys.argv[1:]:
    rows=[]
    for line in open(f):
        m=re.search(r'TIMELINE part=(\d+) start=(\d+) rows_ms=(\d+) closes=(\d+) rolled=(\d+).*close_wall_ms=(\d+)',line)
        if m: rows.append(tuple(map(int,m.groups())))
    labels=['warm-up','first','steady']
    for b in range(len(rows)//6):
        g=rows[b*6:(b+1)*6]
        starts=[r[1] for r in g]; ends=[r[1]+r[2]+r[5] for r in g]
        span=max(ends)-min(starts); busy=sum(r[2]+r[5] for r in g); close=sum(r[5] for r in g)
        hot=[r for r in g if r[4]>0]
        order=sorted(g,key=lambda r:r[1]); rank=[i for i,r in enumerate(order) if r[4]>0]
        print(f"{f.split('/')[-1]:14s} {labels[b] if b<3 else b:8s} span={span/1000:5.1f}s busy/2={busy/2000:5.1f}s idle_slot={2*span-busy:6d}ms ({(2*span-busy)/(2*span)*100:4.1f}%) close_walls={close/1000:4.1f}s hot_start_rank={rank} hot_dur={(hot[0][2]+hot[0][5])/1000 if hot else 0:.1f}s")
