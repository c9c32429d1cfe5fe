# The vs-* layers' backward error beside the dense layers' of the same call, before and after: python3 by_call.py
# (reads layers-main.csv and layers-after.csv, `sparsering-exec repredict --csv` of main b5c22e0 and of this branch).
import csv, collections, statistics as st
a = {r['run']: r for r in csv.DictReader(open('layers-main.csv'))}
b = {r['run']: r for r in csv.DictReader(open('layers-after.csv'))}
fam = collections.OrderedDict()
for k in a:
    d = '/'.join(k.split('/')[:2])
    v = fam.setdefault(d, {'dense': [], 's0': [], 's1': []})
    if a[k]['pattern'] == 'dense': v['dense'].append(100 * float(a[k]['err_bwd']))
    elif a[k]['pattern'].startswith('vs-'):
        v['s0'].append(100 * float(a[k]['err_bwd'])); v['s1'].append(100 * float(b[k]['err_bwd']))
f = lambda x: "%+.1f%% (%d)" % (st.mean(x), len(x))
print("| call (results/) | dense layers' backward | vs-* layers' backward, main | this branch |")
print("|---|---|---|---|")
for d, v in fam.items():
    if v['s0'] and v['dense']: print("| %s | %s | %s | %s |" % (d, f(v['dense']), f(v['s0']), f(v['s1'])))
for name, rows in (('main', a), ('this branch', b)):
    p = [abs(float(r[e])) for r in rows.values() for e in ('err_fwd', 'err_bwd')]
    l = [abs(float(r['err_layer'])) for r in rows.values()]
    print("%s: %d layers, a pass mean %.2f%% max %.1f%%, a layer mean %.2f%% max %.1f%%" %
          (name, len(rows), 100 * st.mean(p), 100 * max(p), 100 * st.mean(l), 100 * max(l)))
