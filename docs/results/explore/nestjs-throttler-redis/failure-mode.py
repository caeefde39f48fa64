#!/usr/bin/env python3
"""Reproduces a finding of `ratelab audit --explore` on nestjs-throttler/redis (claimed policy first-hit:10,1s):

    failure-mode: declared fail-closed, but 19 requests in flight while the store was down got no answer until it was back (requests [206, 207, 208, 209, 210, 211, 212, 213])

Start the target, then: python3 {this file} [URL ...] [--store-pid PID] [--restart CMD]
[--redis-port PORT], one URL per instance ({key} where the key goes in the path), the
store's pid to freeze or kill it, the command that starts it again, its Redis port to
pause it. Python's standard library only. Exit 1: reproduced (a violation of the
finding's kind); 0: not this time.
In ratelab: ratelab audit --explore nestjs-throttler/redis --replay docs/results/explore/nestjs-throttler-redis/failure-mode.json
"""
import email.utils, os, re, shlex, signal, socket, subprocess, sys, threading, time, urllib.error, urllib.request

URLS = ["http://127.0.0.1:36389/", "http://127.0.0.1:37061/"]
KEY_HEADER = "x-key"
DENY = (429,)
ALIGN_MS = 1000
CLOCK_RES_MS = 2
RECOVERY_MS = 1000
# How late (ms) a request may be sent and answered after its planned time, for the
# counts below: each holds one value per slack.
SLACKS_MS = [20, 100, 300, 1000]
# The check whose violation this reproduces (others are printed, not counted).
CHECK = "failure-mode"
# (ms after the start, key, instance)
REQUESTS = [
    (470.615, 0, 1),
    (652.433, 0, 0),
    (834.251, 0, 0),
    (1016.069, 0, 0),
    (1197.887, 0, 0),
    (1379.705, 0, 0),
    (1561.523, 0, 0),
    (1743.341, 0, 0),
    (1925.159, 0, 0),
    (1975.159, 0, 1),
    (2025.159, 0, 1),
    (2075.159, 0, 1),
    (2125.159, 0, 1),
    (2175.159, 0, 1),
    (2225.159, 0, 0),
    (2275.159, 0, 0),
    (2325.159, 0, 0),
    (2375.159, 0, 1),
    (2425.159, 0, 0),
    (2475.159, 0, 0),
    (2525.159, 0, 0),
    (2575.159, 0, 1),
    (2625.159, 0, 0),
    (2675.159, 0, 0),
    (2725.159, 0, 0),
    (2775.159, 0, 0),
    (2825.159, 0, 1),
    (2875.159, 0, 0),
    (2925.159, 0, 1),
    (2975.159, 0, 1),
    (3025.159, 0, 1),
    (3075.159, 0, 0),
    (3125.159, 0, 0),
    (3175.159, 0, 1),
    (3270.397, 0, 1),
    (3365.635, 0, 1),
    (3460.873, 0, 1),
    (3556.111, 0, 1),
    (3651.349, 0, 1),
    (3746.587, 0, 1),
    (3841.825, 0, 0),
    (3937.063, 0, 1),
    (5256.825, 1, 1),
    (5281.825, 1, 0),
    (5306.825, 1, 0),
    (5331.825, 1, 0),
    (5356.825, 1, 0),
    (5381.825, 1, 0),
    (5406.825, 1, 0),
    (5431.825, 1, 1),
    (5456.825, 1, 0),
    (5481.825, 1, 0),
    (5506.825, 1, 1),
    (5531.825, 1, 0),
    (5556.825, 1, 1),
    (5581.825, 1, 1),
    (5606.825, 1, 0),
    (5631.825, 1, 1),
    (5656.825, 1, 1),
    (5681.825, 1, 1),
    (5706.825, 1, 0),
    (5731.825, 1, 1),
    (5756.825, 1, 1),
    (5781.825, 1, 1),
    (5806.825, 1, 1),
    (5831.825, 1, 0),
    (5856.825, 1, 0),
    (5881.825, 1, 0),
    (5906.825, 1, 1),
    (5931.825, 1, 1),
    (5956.825, 1, 1),
    (5981.825, 1, 0),
    (6006.825, 1, 1),
    (6031.825, 1, 0),
    (6056.825, 1, 0),
    (6081.825, 1, 1),
    (6106.825, 1, 0),
    (6131.825, 1, 1),
    (6156.825, 1, 0),
    (6181.825, 1, 1),
    (6206.825, 1, 0),
    (6231.825, 1, 0),
    (6256.825, 1, 0),
    (6281.825, 1, 1),
    (6306.825, 1, 1),
    (6331.825, 1, 1),
    (6356.825, 1, 0),
    (6381.825, 1, 1),
    (6406.825, 1, 1),
    (6431.825, 1, 1),
    (6456.825, 1, 0),
    (6481.825, 1, 0),
    (6506.825, 1, 0),
    (6531.825, 1, 1),
    (6556.825, 1, 0),
    (6581.825, 1, 1),
    (6606.825, 1, 0),
    (6631.825, 1, 0),
    (6656.825, 1, 0),
    (6681.825, 1, 1),
    (6706.825, 1, 0),
    (6731.825, 1, 0),
    (6756.825, 1, 1),
    (6781.825, 1, 0),
    (6806.825, 1, 1),
    (6831.825, 1, 0),
    (6856.825, 1, 0),
    (6881.825, 1, 1),
    (6906.825, 1, 1),
    (6931.825, 1, 0),
    (6956.825, 1, 1),
    (6981.825, 1, 1),
    (7006.825, 1, 0),
    (7031.825, 1, 0),
    (7056.825, 1, 1),
    (7081.825, 1, 0),
    (7106.825, 1, 1),
    (7131.825, 1, 0),
    (7156.825, 1, 1),
    (7181.825, 1, 0),
    (7206.825, 1, 1),
    (7231.825, 1, 0),
    (7256.825, 1, 1),
    (7281.825, 1, 1),
    (7306.825, 1, 1),
    (7331.825, 1, 0),
    (7356.825, 1, 0),
    (7381.825, 1, 1),
    (7406.825, 1, 0),
    (7431.825, 1, 0),
    (7456.825, 1, 0),
    (7481.825, 1, 1),
    (7506.825, 1, 1),
    (7531.825, 1, 1),
    (7556.825, 1, 1),
    (7581.825, 1, 0),
    (7606.825, 1, 1),
    (7631.825, 1, 1),
    (7656.825, 1, 0),
    (7681.825, 1, 0),
    (7706.825, 1, 1),
    (7731.825, 1, 1),
    (7756.825, 1, 1),
    (7781.825, 1, 1),
    (7806.825, 1, 1),
    (7831.825, 1, 1),
    (7856.825, 1, 1),
    (7881.825, 1, 0),
    (7906.825, 1, 0),
    (7931.825, 1, 1),
    (7956.825, 1, 0),
    (7981.825, 1, 0),
    (8006.825, 1, 1),
    (8031.825, 1, 1),
    (8056.825, 1, 1),
    (8081.825, 1, 1),
    (8106.825, 1, 0),
    (8131.825, 1, 1),
    (8156.825, 1, 0),
    (8181.825, 1, 0),
    (8206.825, 1, 0),
    (8231.825, 1, 1),
    (8256.825, 1, 1),
    (8281.825, 1, 0),
    (8306.825, 1, 0),
    (8331.825, 1, 1),
    (8356.825, 1, 1),
    (8381.825, 1, 0),
    (8406.825, 1, 1),
    (8431.825, 1, 1),
    (8456.825, 1, 0),
    (8481.825, 1, 1),
    (8506.825, 1, 0),
    (8531.825, 1, 0),
    (8556.825, 1, 1),
    (8581.825, 1, 1),
    (8606.825, 1, 0),
    (8618.566, 0, 0),
    (8631.825, 1, 1),
    (8656.825, 1, 0),
    (8681.825, 1, 0),
    (8706.825, 1, 0),
    (8731.825, 1, 0),
    (8736.213, 0, 1),
    (8756.825, 1, 1),
    (8781.825, 1, 0),
    (8806.825, 1, 0),
    (8831.825, 1, 1),
    (8852.429, 2, 1),
    (8853.860, 0, 0),
    (8856.825, 1, 1),
    (8877.429, 2, 1),
    (8881.825, 1, 1),
    (8902.429, 2, 1),
    (8906.825, 1, 0),
    (8927.429, 2, 0),
    (8931.825, 1, 1),
    (8952.429, 2, 0),
    (8956.825, 1, 1),
    (8971.507, 0, 1),
    (8977.429, 2, 1),
    (8981.825, 1, 1),
    (9002.429, 2, 0),
    (9006.825, 1, 0),
    (9027.429, 2, 1),
    (9031.825, 1, 0),
    (9052.429, 2, 1),
    (9077.429, 2, 0),
    (9089.154, 0, 1),
    (9102.429, 2, 0),
    (9127.429, 2, 1),
    (9152.429, 2, 0),
    (9177.429, 2, 1),
    (9202.429, 2, 1),
    (9206.801, 0, 1),
    (9227.429, 2, 1),
    (9252.429, 2, 0),
    (9277.429, 2, 1),
    (9302.429, 2, 1),
    (9324.448, 0, 0),
    (9327.429, 2, 0),
    (9352.429, 2, 0),
    (9377.429, 2, 0),
    (9402.429, 2, 1),
    (9427.429, 2, 0),
    (9442.095, 0, 0),
    (9452.429, 2, 1),
    (9477.429, 2, 1),
    (9502.429, 2, 1),
    (9527.429, 2, 1),
    (9552.429, 2, 0),
    (9559.742, 0, 1),
    (9577.429, 2, 0),
    (9602.429, 2, 0),
    (9627.429, 2, 1),
    (9652.429, 2, 0),
    (9677.389, 0, 1),
    (9677.429, 2, 0),
    (9702.429, 2, 0),
    (9727.429, 2, 0),
    (9752.429, 2, 1),
    (9777.429, 2, 1),
    (9795.036, 0, 0),
    (9802.429, 2, 1),
    (9827.429, 2, 1),
    (9852.429, 2, 1),
    (9877.429, 2, 1),
    (9902.429, 2, 0),
    (9912.683, 0, 1),
    (9927.429, 2, 1),
    (9952.429, 2, 1),
    (9977.429, 2, 1),
    (10002.429, 2, 1),
    (10027.429, 2, 1),
    (10030.330, 0, 0),
    (10052.429, 2, 1),
    (10077.429, 2, 0),
    (10102.429, 2, 0),
    (10127.429, 2, 1),
    (10147.977, 0, 1),
    (10152.429, 2, 1),
    (10177.429, 2, 1),
    (10202.429, 2, 1),
    (10227.429, 2, 0),
    (10252.429, 2, 0),
    (10265.624, 0, 1),
    (10277.429, 2, 0),
    (10302.429, 2, 1),
    (10327.429, 2, 0),
    (10352.429, 2, 0),
    (10377.429, 2, 0),
    (10383.271, 0, 0),
    (10402.429, 2, 0),
    (10427.429, 2, 0),
    (10452.429, 2, 1),
    (10477.429, 2, 1),
    (10500.918, 0, 0),
    (10502.429, 2, 0),
    (10527.429, 2, 1),
    (10552.429, 2, 1),
    (10577.429, 2, 0),
    (10602.429, 2, 1),
    (10627.429, 2, 1),
    (10652.429, 2, 0),
    (10677.429, 2, 0),
    (10702.429, 2, 1),
    (10727.429, 2, 0),
    (10752.429, 2, 1),
    (10777.429, 2, 0),
    (10802.429, 2, 0),
    (10827.429, 2, 1),
    (10852.429, 2, 1),
    (10877.429, 2, 0),
    (10902.429, 2, 1),
    (10927.429, 2, 1),
    (10952.429, 2, 0),
    (10977.429, 2, 1),
    (11002.429, 2, 1),
    (11027.429, 2, 1),
    (11052.429, 2, 1),
    (11077.429, 2, 1),
    (11102.429, 2, 1),
    (11127.429, 2, 1),
    (11152.429, 2, 0),
    (11177.429, 2, 0),
    (11202.429, 2, 1),
    (11227.429, 2, 0),
    (11252.429, 2, 1),
    (11277.429, 2, 0),
    (11302.429, 2, 0),
    (11327.429, 2, 1),
    (11352.429, 2, 0),
    (11377.429, 2, 1),
    (11402.429, 2, 1),
    (11427.429, 2, 1),
    (11452.429, 2, 1),
    (11477.429, 2, 1),
    (11502.429, 2, 1),
    (11527.429, 2, 0),
    (11552.429, 2, 0),
    (11577.429, 2, 1),
    (11602.429, 2, 1),
    (11627.429, 2, 1),
    (11652.429, 2, 0),
    (11677.429, 2, 1),
    (11702.429, 2, 1),
    (11727.429, 2, 1),
    (11752.429, 2, 0),
    (11777.429, 2, 0),
    (11802.429, 2, 0),
    (11827.429, 2, 0),
    (11852.429, 2, 1),
    (11877.429, 2, 1),
    (11902.429, 2, 1),
    (11927.429, 2, 1),
    (11952.429, 2, 0),
    (11977.429, 2, 1),
]
# (ms after the start, fault, lasting ms)
FAULTS = [
    (9052.429, "restart", 723.336),
]
# The fewest and the most the claimed policy admits of each key's requests, decided at
# their planned times or up to each slack later (ratelab's specification of first-hit:10,1s, the
# extremes over the timings it tried), for the keys the finding names: all of them
# (LEAST, MOST), and those planned before the first fault (LEAST_BEFORE_FAULT,
# MOST_BEFORE_FAULT, used when the script applies one).
LEAST = {0: [47, 46, 44, 44], 1: [40, 40, 40, 40], 2: [33, 32, 32, 35]}
MOST = {0: [47, 48, 49, 50], 1: [40, 40, 44, 50], 2: [36, 40, 40, 41]}
LEAST_BEFORE_FAULT = {0: [34, 33, 31, 31], 1: [40, 40, 40, 40], 2: [8, 8, 8, 8]}
MOST_BEFORE_FAULT = {0: [34, 35, 36, 39], 1: [40, 40, 44, 50], 2: [8, 8, 8, 8]}
# From any state, at most BURST + AMOUNT * span / PERIOD_MS admitted in any span (ms).
BURST, AMOUNT, PERIOD_MS = 20, 10, 1000
# Whether the claim is a token bucket, whose remaining count grows at its refill rate.
BUCKET = False
# The most room the claimed policy reports left after each of a key's requests, in
# planned order, at the timings tried, per slack (used when no fault runs).
MOST_LEFT = {0: [[9, 8, 7, 6, 5, 4, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 0, 0, 0, 0, 0, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 0, 0, 0, 0, 0, 0, 0, 9, 8, 7, 6, 9, 8, 7, 6, 5, 4, 3, 2, 1, 9, 8, 7, 6, 5, 4, 3, 2], [9, 8, 7, 6, 5, 9, 9, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 0, 9, 8, 9, 9, 9, 8, 7, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 0, 9, 9, 9, 9, 9, 8, 9, 8, 7, 6, 5, 4, 3, 2, 9, 9, 9, 8, 7, 6, 5, 4, 3], [9, 8, 7, 6, 9, 9, 9, 9, 8, 7, 6, 5, 4, 3, 9, 8, 7, 9, 8, 9, 9, 9, 9, 8, 9, 9, 9, 8, 9, 8, 7, 6, 5, 4, 9, 8, 9, 9, 9, 9, 9, 9, 9, 8, 7, 6, 5, 4, 3, 9, 9, 9, 9, 9, 8, 7, 6, 5, 9], [9, 9, 9, 8, 7, 9, 9, 9, 9, 9, 9, 9, 9, 8, 7, 6, 5, 9, 8, 9, 9, 9, 8, 7, 9, 9, 8, 7, 6, 9, 8, 9, 8, 9, 8, 9, 9, 9, 9, 9, 9, 9, 9, 8, 7, 6, 5, 9, 8, 9, 9, 9, 9, 8, 7, 6, 9, 9, 9]], 1: [[9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9, 9, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9, 9, 9, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0], [9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9, 8, 9, 9, 9, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9, 8, 9, 9, 9, 9, 9, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9, 8, 7, 9, 9, 9, 9, 9, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0], [9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9, 8, 7, 6, 5, 4, 3, 9, 9, 8, 9, 9, 9, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9, 8, 7, 6, 5, 4, 3, 2, 9, 9, 9, 8, 9, 9, 9, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9, 8, 7, 6, 5, 4, 3, 2, 9, 9, 9, 9, 9, 9, 9, 9, 8, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9, 8, 7, 6], [9, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9, 8, 7, 6, 9, 9, 9, 9, 9, 9, 8, 7, 6, 5, 4, 3, 9, 8, 7, 9, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9, 9, 9, 9, 9, 8, 9, 8, 7, 9, 8, 7, 9, 8, 7, 6, 5, 9, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9, 9, 8, 9, 9, 9, 9, 8, 9, 8, 9, 8, 7, 6, 5, 9, 8, 9, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9, 9, 8, 9, 9, 8, 9, 9, 9, 8]], 2: [[9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9, 9, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9, 9, 9, 8, 7, 6], [9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9, 8, 9, 9, 9, 9, 9, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9, 8, 7, 9, 9, 9, 9, 8, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9, 8, 7, 6, 9, 9, 9, 9, 9, 9], [9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9, 8, 7, 6, 5, 4, 3, 9, 8, 7, 9, 9, 9, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9, 8, 7, 6, 5, 4, 3, 2, 1, 9, 9, 9, 9, 9, 8, 9, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 9, 9, 9, 9, 9, 9, 8, 7], [9, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9, 9, 8, 9, 8, 9, 9, 9, 8, 9, 8, 7, 6, 5, 4, 3, 2, 9, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9, 8, 9, 8, 7, 9, 9, 9, 9, 9, 9, 8, 9, 8, 7, 6, 5, 4, 9, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9, 9, 8, 9, 8, 9, 9, 8, 9, 9, 8, 7, 6, 5, 9, 9, 8, 7, 6, 5]]}


def options(argv):
    urls, opts, i = [], {}, 0
    while i < len(argv):
        if argv[i] in ("--store-pid", "--restart", "--redis-port"):
            if i + 1 == len(argv):
                sys.exit("%s needs a value" % argv[i])
            opts[argv[i]] = argv[i + 1]
            i += 2
        else:
            urls.append(argv[i])
            i += 1
    return urls or URLS, opts


def fields(headers):
    # (remaining, seconds to reset) as ratelab reads them: the RateLimit field's item with
    # the least r (its t beside it), else RateLimit-Remaining / -Reset, else
    # X-RateLimit-Remaining.
    items = []
    for item in (headers.get("RateLimit") or "").split(","):
        r = re.search(r"(?:^|[;\s])(?:r|remaining)=(\d+)", item)
        t = re.search(r"(?:^|[;\s])(?:t|reset)=(\d+)", item)
        if r:
            items.append((int(r.group(1)), int(t.group(1)) if t else None))
    if items:
        return min(items, key=lambda i: i[0])
    for name in ("RateLimit-Remaining", "X-RateLimit-Remaining"):
        value = (headers.get(name) or "").strip()
        if value.isdigit():
            reset = (headers.get("RateLimit-Reset") or "").strip()
            return int(value), int(reset) if reset.isdigit() else None
    return None, None


def send(url, key):
    req = urllib.request.Request(url.replace("{key}", key))
    if KEY_HEADER:
        req.add_header(KEY_HEADER, key)
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return (r.status, r.headers.get("Retry-After")) + fields(r.headers)
    except urllib.error.HTTPError as e:
        return (e.code, e.headers.get("Retry-After")) + fields(e.headers)
    except Exception as e:
        return "no answer: %s" % e, None, None, None


def retry_after_ok(value):
    # RFC 9110: delay-seconds (digits) or an HTTP-date.
    if value is None or value.isdigit():
        return True
    try:
        return email.utils.parsedate_to_datetime(value) is not None
    except (TypeError, ValueError):
        return False


def fault(kind, ms, opts):
    pid = int(opts.get("--store-pid", 0))
    try:
        if kind == "freeze" and pid:
            os.kill(pid, signal.SIGSTOP)
            time.sleep(ms / 1000)
            os.kill(pid, signal.SIGCONT)
            return True
        if kind == "restart" and pid and "--restart" in opts:
            os.kill(pid, signal.SIGKILL)
            time.sleep(ms / 1000)
            # The store started again is the one a later fault acts on.
            opts["--store-pid"] = str(subprocess.Popen(shlex.split(opts["--restart"])).pid)
            return True
        if kind == "slow" and "--redis-port" in opts:
            with socket.create_connection(("127.0.0.1", int(opts["--redis-port"]))) as s:
                n = str(int(ms))
                s.sendall(b"*4\r\n$6\r\nCLIENT\r\n$5\r\nPAUSE\r\n$%d\r\n%s\r\n$3\r\nALL\r\n" % (len(n), n.encode()))
                s.recv(64)
            time.sleep(ms / 1000)
            return True
    except OSError as e:
        print("skipped: %s for %d ms (%s)" % (kind, ms, e))
        return False
    print("skipped: %s for %d ms (say how: --store-pid, --restart, --redis-port)" % (kind, ms))
    return False


def run(urls, opts):
    # Sends the schedule and applies its faults: each request's (key, sent, answered,
    # status, Retry-After, planned, remaining, reset), ms after the start, and each fault
    # applied as (its index in FAULTS, began, ended, whether the store was down).
    prefix = "repro-%d-%d" % (os.getpid(), time.time())
    wait = ALIGN_MS - (time.time() * 1000) % ALIGN_MS
    if wait < 10000:
        time.sleep(wait / 1000)
    start = time.monotonic()
    seen = [None] * len(REQUESTS)

    def request(i, at, key, instance):
        time.sleep(max(0, start + at / 1000 - time.monotonic()))
        sent = time.monotonic() - start
        status, retry_after, left, t = send(urls[instance % len(urls)], "%s-k%d" % (prefix, key))
        seen[i] = (key, sent * 1000, (time.monotonic() - start) * 1000, status, retry_after, at, left, t)

    threads = [threading.Thread(target=request, args=(i,) + r) for i, r in enumerate(REQUESTS)]
    for t in threads:
        t.start()
    applied = []
    for n, (at, kind, ms) in enumerate(FAULTS):
        time.sleep(max(0, start + at / 1000 - time.monotonic()))
        began = (time.monotonic() - start) * 1000
        if fault(kind, ms, opts):
            # A pause only slows the store's answers; the others take it down.
            applied.append((n, began, (time.monotonic() - start) * 1000, kind != "slow"))
    for t in threads:
        t.join()
    return seen, applied


def decided(s):
    return isinstance(s[3], int) and (s[3] in DENY or 200 <= s[3] < 400)


def within(reqs):
    # The tightest slack within which every one of reqs was sent and answered after its
    # planned time, so decided where the specification was asked; None if none is.
    # (A request is sent on its planned time but for the clock's rounding: 1 ms of it.)
    if any(s is None or s[1] < s[5] - 1 for s in reqs):
        return None
    worst = max((s[2] - s[5] for s in reqs), default=0)
    return next((i for i, ms in enumerate(SLACKS_MS) if worst <= ms), None)


def check_held(seen, applied, found):
    # Requests in flight when the store went down and answered once it was back, and those
    # sent in the first half of its spell, when none of these was answered before.
    for _, began, ended, down in applied:
        if not down:
            continue
        early = [s for s in seen if s and began <= s[1] < (began + ended) / 2]
        waited = [s for s in seen if s and s[1] < began and s[2] > ended]
        if (early or waited) and all(s[2] > ended for s in early):
            found.add("failure-mode")
            print("held: %d requests got no answer until the store was back, %.0f ms after it went down" % (len(early) + len(waited), ended - began))


def check_fields(seen, segment, found):
    # The answers' fields, where no fault touched them; counts compared within a segment.
    judged = [s for s in seen if s and segment(s) is not None]
    for s in judged:
        if not retry_after_ok(s[4]):
            found.add("fields")
            print("key %d: Retry-After %r is neither delay-seconds nor an HTTP-date" % (s[0], s[4]))
            break
    for s in judged:
        if s[3] in DENY and s[6] is not None and s[6] >= 1:
            found.add("fields")
            print("key %d: denied, while saying %d remaining" % (s[0], s[6]))
            break
    for s in judged:
        if s[3] in DENY and s[7] is not None and s[4] is not None and s[4].strip().isdigit() and int(s[4]) < s[7]:
            found.add("fields")
            print("key %d: denied with Retry-After %s, earlier than the reset the RateLimit fields give, %d s" % (s[0], s[4].strip(), s[7]))
            break
    if BUCKET:
        told = sorted((s for s in judged if s[6] is not None), key=lambda s: s[1])
        for j, b in enumerate(told):
            grew = [a for a in told[:j] if a[0] == b[0] and segment(a) == segment(b) and a[2] < b[1]
                    and (b[6] - a[6] - 1) * PERIOD_MS >= AMOUNT * (b[2] - a[1] + CLOCK_RES_MS)]
            if grew:
                found.add("fields")
                a = grew[-1]
                print("key %d: remaining went from %d to %d within %.1f ms, faster than the refill" % (b[0], a[6], b[6], b[2] - a[1] + CLOCK_RES_MS))
                break
        # A bucket's denial tells the true wait rounded up: never 0.
        for s in judged:
            if s[3] in DENY and s[4] is not None and s[4].strip() == "0":
                found.add("linearizable")
                print("key %d: denied, and told to retry after 0 seconds" % s[0])
                break


def check_left(seen, found):
    # Without faults, the remaining counts a key's answers gave against the most the policy
    # leaves after its i-th request: whatever order they were decided in, the k-th largest
    # said at most the k-th largest allowed, at the slack every one was answered within.
    for key in sorted(MOST_LEFT):
        mine = [seen[i] for i, r in enumerate(REQUESTS) if r[1] == key]
        i = within(mine)
        if i is None or not all(decided(s) for s in mine):
            continue
        said = sorted((s[6] for s in mine if s[6] is not None), reverse=True)
        allowed = sorted(MOST_LEFT[key][i], reverse=True)
        over = [(k, r, m) for k, (r, m) in enumerate(zip(said, allowed)) if r > m]
        if over:
            found.add("linearizable")
            k, r, m = over[0]
            print("key %d: its answers said %s remaining, where the policy leaves at most %s, each decided within %d ms of its planned time (the %d-th largest: %d > %d)" % (key, said, allowed[:len(said)], SLACKS_MS[i], k + 1, r, m))


def check_counts(seen, applied, segment, found):
    # Before the first fault (or in the whole run without one): each key's admissions no
    # more and no fewer than the policy admits, at the tightest slack its requests were
    # sent and answered within. Then the envelope, in each segment between the faults.
    if applied and applied[0][0] != 0:
        print("count: inconclusive, the schedule's first fault was not applied")
    most = MOST_BEFORE_FAULT if applied else MOST
    least = LEAST_BEFORE_FAULT if applied else LEAST
    before = lambda r: not applied or r[0] < FAULTS[0][0]
    for key in sorted(most):
        mine = [s for s in seen if s and s[0] == key and segment(s) is not None]
        admitted = [s for s in mine if decided(s) and s[3] not in DENY]
        denied = sum(1 for s in mine if s[3] in DENY)
        print("key %d: %d requests, %d admitted, %d denied, %d without a decision" % (key, len(mine), len(admitted), denied, len(mine) - len(admitted) - denied))
        if not applied or applied[0][0] == 0:
            # Every request planned before the first fault, each answered in segment 0.
            counted = [seen[i] for i, r in enumerate(REQUESTS) if r[1] == key and before(r)]
            first = [s for s in counted if s and segment(s) == 0 and decided(s) and s[3] not in DENY]
            i = within([s for s in counted if s and segment(s) == 0])
            whole = all(s and segment(s) == 0 and decided(s) for s in counted)
            j = within(counted) if whole else None
            if i is None:
                print("  count: inconclusive, requests answered more than %d ms after their planned times" % SLACKS_MS[-1])
            elif len(first) > most[key][i]:
                found.add("linearizable")
                print("  count: %d admitted, where the policy admits at most %d of these requests, each decided within %d ms of its planned time" % (len(first), most[key][i], SLACKS_MS[i]))
            elif j is not None and len(first) < least[key][j]:
                found.add("linearizable")
                print("  count: %d admitted, where the policy admits at least %d of these requests, each decided within %d ms of its planned time" % (len(first), least[key][j], SLACKS_MS[j]))
        for part in sorted(set(segment(s) for s in admitted)):
            spell = sorted((s for s in admitted if segment(s) == part), key=lambda s: s[1])
            for i in range(len(spell)):
                last = 0
                for j in range(i, len(spell)):
                    last = max(last, spell[j][2])
                    span = last - spell[i][1] + CLOCK_RES_MS
                    if j - i + 1 > BURST + AMOUNT * span / PERIOD_MS:
                        found.add("envelope")
                        print("  envelope: %d admitted within %.1f ms (sent at %.1f ms on), where at most %d may be" % (j - i + 1, span, spell[i][1], BURST + AMOUNT * span / PERIOD_MS))
                        break
                else:
                    continue
                break


def main():
    urls, opts = options(sys.argv[1:])
    seen, applied = run(urls, opts)
    # Answers a fault touched (in flight from its start until the recovery after it) are held
    # to no policy; the others are, in segments between the faults.
    zones = [(began, ended + RECOVERY_MS) for _, began, ended, _ in applied]

    def segment(s):
        if any(s[1] <= end and s[2] >= begin for begin, end in zones):
            return None
        return sum(1 for _, end in zones if end < s[1])

    # The kinds of violation seen, as ratelab names its checks.
    found = set()
    check_held(seen, applied, found)
    check_fields(seen, segment, found)
    if not applied:
        check_left(seen, found)
    check_counts(seen, applied, segment, found)
    # Reproduced: a violation of the kind the finding is; others are printed, not counted.
    others = ", ".join(sorted(found - {CHECK}))
    print("reproduced" if CHECK in found else "not reproduced this time")
    if others:
        print("also seen: %s" % others)
    sys.exit(1 if CHECK in found else 0)


if __name__ == "__main__":
    main()
