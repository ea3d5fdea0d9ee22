# an edge that loses every packet was accepted, and half the circuits of a small network failed with exit 0; the built-in network's loss must be below 1, and so must a graph's (issue 55; seen at e3eed4c).
# expect-refused: must be a probability from 0 to below 1
graph [
  directed 0
  node [ id 0 host_bandwidth_up "1 Gbit" host_bandwidth_down "1 Gbit" ]
  node [ id 1 host_bandwidth_up "1 Gbit" host_bandwidth_down "1 Gbit" ]
  edge [ source 0 target 0 latency "10 ms" ]
  edge [ source 1 target 1 latency "10 ms" ]
  edge [ source 0 target 1 latency "20 ms" packet_loss 1.0 ]
]
