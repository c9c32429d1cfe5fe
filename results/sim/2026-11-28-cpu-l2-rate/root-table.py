# root-table.py ROOT OUT_NO_L2 OUT_L2: the repredict table over every kept run (ROOT.csv: `repredict --root
# results --csv ROOT.csv`) with the rows of the folders in folders.txt replaced by their re-prediction on the
# 23:12 H100 log refitted without the L2 term (OUT_NO_L2, calib_walk_run.sh's OUT) and with it (OUT_L2). Layer runs
# only: the training steps are in summary-*.txt, per folder.
import csv, os, sys
base = list(csv.DictReader(open(sys.argv[1] + '.csv')))
def variant(v):
    d = {}
    for r in csv.DictReader(open(f'{sys.argv[2 if v == "basebin" else 3]}/repredict-new.csv')):
        d[r['folder'] + '/' + r['run']] = r
    return d
def stats(e):
    a = [abs(x) for x in e]
    return f"{sum(a)/len(a):4.1f} / {max(a):4.1f} ({sum(e)/len(e):+4.1f})"
folders = [l.strip() for l in open(os.path.join(os.path.dirname(sys.argv[0]), 'folders.txt'))]
current = folders[:5]
views = {'kept': {}, 'noL2': variant('basebin'), 'L2': variant('bin')}
print("layer runs: mean / max |err| % (mean signed); n")
for name, keep in [('ALL', lambda k: True), ('H100 folders', lambda k: any(k.startswith(f + '/') for f in folders)),
                   ('H100 current kernels', lambda k: any(k.startswith(f + '/') for f in current)),
                   ('not H100', lambda k: not any(k.startswith(f + '/') for f in folders))]:
    for v, rep in views.items():
        E = {'fwd': [], 'bwd': [], 'layer': []}
        for r in base:
            k = 'results/' + r['run']
            if not keep(k): continue
            rr = rep.get(k, r)
            for p in E: E[p].append(100 * float(rr['err_' + p]))
        print(f"  {name:22s} {v:5s} n={len(E['fwd']):3d}  fwd {stats(E['fwd'])}  bwd {stats(E['bwd'])}  layer {stats(E['layer'])}")
