# Two sites, one in the US and one in Germany, joined by a transatlantic path: 45 ms one way
# (a 90 ms round trip, about that of the US east coast to Frankfurt), and hosts of one site
# 1 ms apart. No loss anywhere: experiments add their own with `network.impairments`. Written
# for the loss experiment of the QUUX evaluation (examples/quux-loss.yaml; Ali Clark, "QUUX: a
# QUIC un-multiplexing of the Tor relay transport", MSc thesis, University College London,
# 2016); host links come from the scenario, so the nodes carry no bandwidth of their own.
graph [
  directed 0
  node [ id 1 label "us" country_code "US" ]
  node [ id 2 label "de" country_code "DE" ]
  edge [ source 1 target 1 latency "1 ms" ]
  edge [ source 2 target 2 latency "1 ms" ]
  edge [ source 1 target 2 latency "45 ms" ]
]
