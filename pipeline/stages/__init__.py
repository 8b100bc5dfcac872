"""What every target stage is given and held to: the one torch.export, the golden set, the parity
metrics and gates, and the Target contract that targets/ implement.

Above `relevance`, below everything that runs a build. targets/ import from here (and from
`relevance`); nothing here names a target.
"""
