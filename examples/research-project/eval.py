"""The dev evaluation loopx runs after each trial: prints ``val_acc: <accuracy on data/dev.csv>``."""

from knn import accuracy

print(f"val_acc: {accuracy('config.json', 'data/train.csv', 'data/dev.csv'):.4f}")
