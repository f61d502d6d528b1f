import sys, datetime
lines = [l.split(" ", 1) for l in open(sys.argv[1]) if " " in l]
resumes = [float(t) for t, x in lines if "resumes from the start" in x]
end = [float(t) for t, x in lines if x.startswith("stream writer, steady state")]
fmt = lambda t: datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime("%H:%M:%S")
b_after = [float(t) for t, x in lines if x.startswith("baseline after")]
print(fmt(resumes[-1] + 2), fmt(end[0]), fmt(end[0] + 1), fmt(b_after[0]))
