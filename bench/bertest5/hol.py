import collections
import pickle
import sys

ex_end, ex_start, info, start, finish, base, orders = pickle.load(open(sys.argv[1], "rb"))
print("nodes", len(info))
# per core MTE2 order
hol = collections.Counter()
holn = collections.Counter()
ahead_bytes = collections.Counter()
ooo_layers = collections.Counter()
for c, order in enumerate(orders):
    off = base[c]
    seq = [off + v for v in order if info[off + v][2] == "MTE2"]
    maxlayer = -1
    prev = None
    for v in seq:
        li = info[v][1]
        if prev is not None:
            pl = info[prev][1]
            # v starts when prev (a later layer's, before it in the pipe) finishes
            if pl > li and start[v] == finish[prev]:
                # the time prev held the pipe (its channel wait included)
                hol[(li, pl)] += finish[prev] - start[prev]
                holn[(li, pl)] += 1
        if li < maxlayer:
            ooo_layers[li] += 1
        maxlayer = max(maxlayer, li)
        prev = v
print(
    "MTE2 nodes of a layer placed after a later layer's MTE2 node (per core order), count by layer:"
)
print(sorted(ooo_layers.items()))
print("behind a later layer's MTE2 node: (layer, later), nodes, its cycles")
for k, n in sorted(hol.items(), key=lambda kv: -kv[1])[:30]:
    print(k, holn[k], n)
