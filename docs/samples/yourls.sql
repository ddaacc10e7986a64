-- MySQL dump 10.13  Distrib 8.0, for Linux (x86_64)
-- Host: localhost    Database: yourls
/*!40101 SET NAMES utf8mb4 */;
DROP TABLE IF EXISTS `yourls_url`;
CREATE TABLE `yourls_url` (
  `keyword` varchar(100) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL DEFAULT '',
  `url` text CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  `title` text,
  `timestamp` timestamp NOT NULL DEFAULT current_timestamp(),
  `ip` varchar(41) NOT NULL,
  `clicks` int(10) unsigned NOT NULL,
  PRIMARY KEY (`keyword`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;
LOCK TABLES `yourls_url` WRITE;
INSERT INTO `yourls_url` VALUES ('ozh','http://ozh.org/','ozh.org','2009-09-25 14:13:19','127.0.0.1',4),('yourlsorg','http://yourls.org/?ref=it\'s','YOURLS: Your Own URL Shortener','2009-09-25 14:13:19','127.0.0.1',2),('ghub','https://github.com/YOURLS/YOURLS','GitHub','2020-04-01 08:00:00','::1',0);
UNLOCK TABLES;
INSERT INTO `yourls_options` VALUES (1,'version','1.9.2');
