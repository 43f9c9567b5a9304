"""Training one run (`train`), evaluating it at every length (`evaluate`) and the experiment trackers
it reports to (`loggers`)."""
