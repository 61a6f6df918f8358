"""The FL loop: trainer, client training, the batched step of a group of runs, evaluation."""
