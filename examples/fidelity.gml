# Four sites for the fidelity check (FIDELITY.md): one-way latencies of 10-40 ms between hosts
# (round trips of 20-80 ms) and a little loss on the long paths. Host links come from the
# scenario, so the nodes carry no bandwidth of their own.
graph [
  directed 0
  node [ id 1 label "de" country_code "DE" ]
  node [ id 2 label "nl" country_code "NL" ]
  node [ id 3 label "fr" country_code "FR" ]
  node [ id 4 label "us" country_code "US" ]
  edge [ source 1 target 1 latency "10 ms" ]
  edge [ source 2 target 2 latency "10 ms" ]
  edge [ source 3 target 3 latency "10 ms" ]
  edge [ source 4 target 4 latency "12 ms" ]
  edge [ source 1 target 2 latency "15 ms" ]
  edge [ source 1 target 3 latency "20 ms" ]
  edge [ source 2 target 3 latency "18 ms" ]
  edge [ source 1 target 4 latency "40 ms" packet_loss 0.002 ]
  edge [ source 2 target 4 latency "38 ms" packet_loss 0.002 ]
  edge [ source 3 target 4 latency "40 ms" packet_loss 0.002 ]
]
