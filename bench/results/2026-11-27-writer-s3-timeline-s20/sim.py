import re,sys,heapq
# replay: each batch's measured task durations (rows + closes) scheduled on 2 slots in Spark's
# index order vs largest input first (input = rows: the hot task first, then by closes as a proxy? no: by measured duration)
def makespan(durs):
    slots=[0.0,0.0]
    for d in durs:
        i=slots.index(min(slots)); slots[i]+=d
    return max(slots)
for f in sys.argv[1:]:
    rows=[]
    for line in open(f):
        m=re.search(r'TIMELINE part=(\d+) start=(\d+) rows_ms=(\d+) closes=(\d+) rolled=(\d+).*close_wall_ms=(\d+)',line)
        if m: rows.append(tuple(map(int,m.groups())))
    for b in range(len(rows)//6):
        g=sorted(rows[b*6:(b+1)*6],key=lambda r:r[1])  # in start order = Spark's order
        d=[(r[2]+r[5])/1000 for r in g]
        hot=[i for i,r in enumerate(g) if r[4]>0][0]
        # largest input first: the hot task first, the rest in the same order (their inputs are near equal)
        lpt=[d[hot]]+[x for i,x in enumerate(d) if i!=hot]
        print(f"{f.split('/')[-1]:14s} batch{b} spark_order={makespan(d):5.1f}s hot_first={makespan(lpt):5.1f}s lower_bound={max(sum(d)/2,max(d)):5.1f}s hot_rank={hot}")
